"""``?``: every key of the screen underneath and of the app, in a dialog that any key closes.

A binding's tooltip, where it has one, is its long description (the footer shows the short one);
a screen's ``WIDGET_KEYS`` lists the keys its panes handle themselves (space in a list, Tab between
panes, scrolling), so that the dialog names every key that does something on that screen.
"""

from __future__ import annotations

import io

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static


def _key_name(screen: Screen[object], binding: Binding) -> str:
    # "right_square_bracket" is shown as "]", as in the footer
    keys = [k.strip() for k in binding.key.split(",")]
    return ", ".join(screen.app.get_key_display(binding.with_key(k)) for k in keys)


def bindings_table(screen: Screen[object]) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column(Text("key"))
    table.add_column(Text("does"))
    seen: set[str] = set()
    for owner in (screen, screen.app):
        for b in getattr(owner, "BINDINGS", []):
            binding = b if isinstance(b, Binding) else Binding(*b)
            if binding.key in seen or not binding.description:
                continue
            seen.add(binding.key)
            does = binding.tooltip or binding.description
            table.add_row(Text(_key_name(screen, binding), style="bold"), Text(does))
    for keys, does in getattr(screen, "WIDGET_KEYS", ()):
        table.add_row(Text(keys, style="bold"), Text(does))
    return table


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 70; max-width: 100%; height: auto; max-height: 90%;
        border: round $accent; padding: 0 1; background: $surface; }
    """

    def __init__(self, below: Screen[object]) -> None:
        super().__init__()
        self.below = below

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("Keys of this screen (any key closes this)", style="bold"))
            yield Static(bindings_table(self.below), id="keys")

    def bindings_text(self) -> str:
        """The keys as plain text (what the dialog shows, for tests and screen readers)."""
        from rich.console import Console

        console = Console(width=100, record=True, file=io.StringIO())
        console.print(bindings_table(self.below))
        return console.export_text()

    def on_key(self, event: events.Key) -> None:
        event.stop()
        self.dismiss()
