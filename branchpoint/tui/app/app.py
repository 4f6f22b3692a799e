"""The Textual app behind ``branchpoint tui``: browse runs and conversations, read a transcript with
its verdicts, compare the arms of a tree, label blind, watch a run.

It reads the store through ``branchpoint.core.read.browse`` in worker threads and writes nothing but human
labels. Heavy packages (pandas, torch, litellm) are never imported here.
"""

from __future__ import annotations

from textual.app import App
from textual.binding import Binding

from branchpoint.core.store import Store
from branchpoint.tui.app.screens.agreement import AgreementScreen
from branchpoint.tui.app.screens.browse import BrowseScreen
from branchpoint.tui.app.screens.compare import CompareScreen
from branchpoint.tui.app.screens.help import HelpScreen
from branchpoint.tui.app.screens.label import LabelScreen
from branchpoint.tui.app.screens.live import LiveScreen
from branchpoint.tui.app.screens.transcript import TranscriptScreen


class BranchpointApp(App[None]):
    TITLE = "branchpoint"
    BINDINGS = [
        Binding("question_mark", "help", "keys"),
        Binding("ctrl+q", "quit", "quit", show=False),
    ]

    def __init__(
        self,
        store: Store,
        *,
        annotator: str = "anonymous",
        conversation: str | None = None,
        live_run: str | None = None,
        page_size: int = 50,
        sample_size: int = 30,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.store = store
        self.annotator = annotator
        self.start_conversation = conversation
        self.start_live = live_run
        self.page_size = page_size
        self.sample_size = sample_size
        self.seed = seed

    def on_mount(self) -> None:
        self.push_screen(BrowseScreen())
        if self.start_conversation is not None:
            self.open_transcript(self.start_conversation)
        if self.start_live is not None:
            self.open_live(self.start_live or None)

    # Where the screens go (branchpoint.tui.app.context.AppContext): only the app imports the screens.

    def open_transcript(self, conversation_id: str, judge: str | None = None) -> None:
        self.push_screen(TranscriptScreen(conversation_id, judge=judge))

    def open_compare(
        self, conversation_id: str, judge: str | None = None, across: str = "arms"
    ) -> None:
        self.push_screen(CompareScreen(conversation_id, judge=judge, across=across))

    def open_label_sample(self, run_id: str | None, judge: str | None) -> None:
        self.push_screen(LabelScreen.sample(run_id=run_id, judge=judge))

    def open_label_conversations(self, conversation_ids: list[str]) -> None:
        self.push_screen(LabelScreen.conversations(conversation_ids))

    def open_realism(self, run_id: str | None) -> None:
        self.push_screen(LabelScreen.realism(run_id=run_id))

    def open_live(self, run_id: str | None) -> None:
        self.push_screen(LiveScreen(run_id))

    def open_agreement(self, run_id: str | None) -> None:
        self.push_screen(AgreementScreen(run_id))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))
