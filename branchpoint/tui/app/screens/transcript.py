"""One transcript with its verdicts: step turn by turn, jump between failures, switch judge.

The transcript (at most a few dozen turns) is loaded once; "next failure" is a query on the
judgments table (``branchpoint.core.read.browse.find_failure``), so it also works on a conversation whose
judgments are still being written.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from branchpoint.core.read.browse import Transcript, find_failure, get_transcript
from branchpoint.core.read.persona_flags import TurnFlags, turn_flags
from branchpoint.core.records import Judgment
from branchpoint.tui.app.choices import choices_summary
from branchpoint.tui.app.context import AppContext
from branchpoint.tui.app.safe_text import one_line
from branchpoint.tui.app.widgets.turn_view import TurnView, verdict_lines


def conversation_meta(t: Transcript, judge: str | None) -> Text:
    c = t.conversation
    meta = Text()
    meta.append("conversation ", style="bold")
    meta.append_text(one_line(c.id))
    meta.append("  scenario ")
    meta.append_text(one_line(c.scenario_id, 30))
    meta.append("\narm ")
    meta.append_text(one_line(choices_summary(c.choices) or "-", 60))
    meta.append("\ntarget ")
    meta.append_text(one_line(c.target, 30))
    meta.append("  condition ")
    meta.append_text(one_line(c.condition, 16))
    meta.append(f"  {c.status}", style="green" if c.status == "completed" else "yellow")
    if c.stop_reason:
        meta.append_text(one_line(f" ({c.stop_reason})"))
    meta.append("\njudge ")
    meta.append_text(one_line(judge or "(none)", 40, style="bold"))
    if len(t.judges) > 1:
        meta.append(f"  ({len(t.judges)} judges: J switches)", style="dim")
    return meta


class TranscriptScreen(Screen[None]):
    DEFAULT_CSS = """
    TranscriptScreen #meta { height: auto; max-height: 5; background: $panel; padding: 0 1; }
    TranscriptScreen #turns { height: 1fr; }
    TranscriptScreen .marker { color: $text-muted; padding: 0 1; }
    TranscriptScreen .fork { color: magenta; }
    """
    BINDINGS = [
        Binding("j,down", "step(1)", "next", tooltip="next turn"),
        Binding("k,up", "step(-1)", "previous turn", show=False),
        Binding("n", "failure('next')", "failure", tooltip="next failure"),
        Binding("N", "failure('previous')", "prev failure", show=False),
        Binding("e", "expand", "evidence", tooltip="rationale and evidence of this turn"),
        Binding("E", "expand_all", "evidence of every turn", show=False),
        Binding("r", "reasoning", "reasoning", show=False),
        Binding("J", "switch_judge", "judge", tooltip="the next judge's verdicts"),
        Binding("home", "jump(0)", "first turn", show=False),
        Binding("end", "jump(-1)", "last turn", show=False),
        Binding("c", "compare", "compare", tooltip="compare the arms of this tree"),
        # not in the footer (full at 80 columns); ? lists it
        Binding(
            "T",
            "compare_targets",
            "compare targets",
            show=False,
            tooltip="every target's conversation of this cell, side by side",
        ),
        Binding("l", "label", "label", tooltip="label every turn (not blind)"),
        Binding(
            "p",
            "replay",
            "replay",
            show=False,
            tooltip="replay: send another message at this persona turn (a live call)",
        ),
        Binding("escape,q", "app.pop_screen", "back"),
    ]

    def __init__(self, conversation_id: str, *, judge: str | None = None) -> None:
        super().__init__()
        self.conversation_id = conversation_id
        self.judge = judge
        self.transcript: Transcript | None = None
        self.current = 0
        self.views: list[TurnView] = []

    @property
    def bp_app(self) -> AppContext:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text("loading ..."), id="meta")
        turns = VerticalScroll(id="turns")
        turns.can_focus = False  # the screen's keys step through turns; the wheel still scrolls
        yield turns
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="transcript")
    def load(self) -> None:
        t = get_transcript(self.bp_app.store, self.conversation_id)
        flags = turn_flags(self.bp_app.store, self.conversation_id) if t is not None else {}
        self.app.call_from_thread(self._show, t, flags)  # type: ignore[arg-type]

    def _judgments_for(self, turn_index: int | None) -> list[Judgment]:
        if self.transcript is None:
            return []
        return [
            j
            for j in self.transcript.judgments
            if j.judge == self.judge and j.turn_index == turn_index
        ]

    async def _show(self, t: Transcript | None, flags: dict[int, TurnFlags] | None = None) -> None:
        meta = self.query_one("#meta", Static)
        if t is None:
            meta.update(one_line(f"no conversation {self.conversation_id} in this store"))
            return
        self.transcript = t
        if self.judge not in t.judges:
            self.judge = t.judges[0] if t.judges else None
        meta.update(conversation_meta(t, self.judge))
        box = self.query_one("#turns", VerticalScroll)
        await box.remove_children()
        widgets: list[Static] = []
        whole = self._judgments_for(None)
        if whole:
            widgets.append(Static(Text("whole conversation:", style="bold"), classes="marker"))
            widgets.append(Static(Group(*verdict_lines(whole, expanded=True))))
        stage: str | None = None
        self.views = []
        fork = t.conversation.fork_turn if t.conversation.parent_id else None
        for turn in t.turns:
            if fork is not None and turn.index == fork:
                label = f"\u2442 fork: this arm's own turns start here (turn {turn.index})"
                widgets.append(Static(Text(label), classes="marker fork"))
            if turn.stage and turn.stage != stage:
                stage = turn.stage
                line = Text("\u2500\u2500 stage ").append_text(one_line(stage, 40))
                widgets.append(Static(line, classes="marker"))
            view = TurnView(
                turn,
                self._judgments_for(turn.index),
                shared=bool(turn.origin_turn_id),
                flags=(flags or {}).get(turn.index) if turn.role == "user" else None,
                id=f"turn-{turn.index}",
            )
            self.views.append(view)
            widgets.append(view)
        await box.mount_all(widgets)
        self.current = 0
        self._mark_current()

    def _mark_current(self) -> None:
        for i, view in enumerate(self.views):
            view.set_class(i == self.current, "current")
        if self.views:
            self.views[self.current].scroll_visible(animate=False, top=True)

    def current_turn_index(self) -> int:
        return self.views[self.current].turn.index if self.views else -1

    # ------------------------------------------------------------------ actions

    def action_step(self, delta: int) -> None:
        if self.views:
            self.current = max(0, min(len(self.views) - 1, self.current + delta))
            self._mark_current()

    def action_jump(self, position: int) -> None:
        if self.views:
            self.current = position % len(self.views)
            self._mark_current()

    def action_failure(self, direction: str) -> None:
        self.find_failure(direction)

    @work(thread=True, exclusive=True, group="failure")
    def find_failure(self, direction: str) -> None:
        index = find_failure(
            self.bp_app.store,
            self.conversation_id,
            self.current_turn_index(),
            direction="next" if direction == "next" else "previous",
            judge=self.judge,
        )
        self.app.call_from_thread(self._go_to_turn, index, direction)

    def _go_to_turn(self, index: int | None, direction: str) -> None:
        if index is None:
            self.notify(f"no {direction} failure for this judge", markup=False)
            return
        for i, view in enumerate(self.views):
            if view.turn.index == index:
                self.current = i
                self._mark_current()
                return

    def action_expand(self) -> None:
        if self.views:
            self.views[self.current].toggle_expanded()

    def action_expand_all(self) -> None:
        # all open if any is closed, else all closed
        opened = not all(view.expanded for view in self.views)
        for view in self.views:
            if view.expanded != opened:
                view.toggle_expanded()

    def action_reasoning(self) -> None:
        if self.views:
            self.views[self.current].toggle_reasoning()

    def action_switch_judge(self) -> None:
        t = self.transcript
        if t is None or len(t.judges) < 2:
            self.notify("this conversation has one judge or none", markup=False)
            return
        i = t.judges.index(self.judge) if self.judge in t.judges else -1
        self.judge = t.judges[(i + 1) % len(t.judges)]
        self.query_one("#meta", Static).update(conversation_meta(t, self.judge))
        for view in self.views:
            view.set_judgments(self._judgments_for(view.turn.index))

    def action_compare(self) -> None:
        self.bp_app.open_compare(self.conversation_id, self.judge)

    def action_compare_targets(self) -> None:
        self.bp_app.open_compare(self.conversation_id, self.judge, across="targets")

    def action_label(self) -> None:
        self.bp_app.open_label_conversations([self.conversation_id])

    # -------------------------------------------------------------- replay (issue 47)

    def action_replay(self) -> None:
        if not self.views:
            return
        turn = self.views[self.current].turn
        if turn.role != "user":
            self.notify("replay: step to a persona turn (j/k) first", markup=False)
            return
        from branchpoint.tui.app.screens.replay_prompt import ReplayPrompt

        def send(message: str | None) -> None:
            if message:
                self.notify(f"replaying from turn {turn.index} ...", markup=False)
                self.run_replay(turn.index, message)

        self.app.push_screen(ReplayPrompt(turn.index, turn.content or ""), send)

    @work(thread=True, exclusive=True, group="replay")
    def run_replay(self, at: int, message: str) -> None:
        """``branchpoint replay`` in a worker thread (its own event loop: a live call)."""
        import asyncio

        from branchpoint.core.errors import UserError
        from branchpoint.simulator.replay import areplay

        try:
            result = asyncio.run(
                areplay(
                    self.bp_app.store, self.conversation_id, at, message,
                    annotator=self.bp_app.annotator,
                )
            )  # fmt: skip
        except UserError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error", markup=False)
            return
        self.app.call_from_thread(self._replayed, result.conversation_id, result.status)

    def _replayed(self, conversation_id: str, status: str) -> None:
        self.notify(f"replay {conversation_id}: {status}; compare shows it beside this arm",
                    markup=False)  # fmt: skip
        self.bp_app.open_compare(conversation_id, self.judge)
