"""``p`` on a persona turn: the message to send instead (issue 47's replay), in a small dialog.

Enter sends it (the transcript screen then runs ``branchpoint replay`` in a worker); Escape, or an
empty message, cancels.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from branchpoint.tui.app.safe_text import one_line


class ReplayPrompt(ModalScreen[str | None]):
    DEFAULT_CSS = """
    ReplayPrompt { align: center middle; }
    ReplayPrompt > Vertical { width: 90; max-width: 100%; height: auto; border: round $accent;
        padding: 0 1; background: $surface; }
    """
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, turn_index: int, original: str) -> None:
        super().__init__()
        self.turn_index = turn_index
        self.original = original

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                Text(f"Replay from persona turn {self.turn_index}: send instead of", style="bold")
            )
            yield Static(one_line(self.original, 80))  # model text, shown literally
            yield Input(
                placeholder="the persona's message (enter sends, escape cancels)", id="message"
            )

    def on_mount(self) -> None:
        self.query_one("#message", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value if event.value.strip() else None)

    def action_cancel(self) -> None:
        self.dismiss(None)
