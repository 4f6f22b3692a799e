"""The one rule for showing model-derived text in the app: literally, and inert.

Every string that a model, a persona, a judge or a scenario file produced reaches the screen through
``untrusted()``. It returns a ``rich.text.Text``, which Textual never parses for markup (a plain
``str`` in Static, Label, DataTable cells, OptionList, Tree labels or border titles is parsed:
``[/x]`` raises, ``[@click=app.quit]`` becomes a live action, ``[Name]`` vanishes). Control
characters are written as escapes by the project's one untrusted-text policy
(``branchpoint.core.untrusted.visible``), so an ANSI or OSC sequence (clear screen, cursor moves, OSC 52
clipboard writes) loses its ESC byte and is shown as the text it is (``\\x1b]52;...``).
"""

from __future__ import annotations

from rich.text import Text

from branchpoint.core.untrusted import visible


def clean(text: object) -> str:
    """``text`` as a string under ``branchpoint.core.untrusted.visible``: newlines kept, every control
    character (a lone ``\\r``, ESC, a bidi override) written as an escape."""
    return visible(text)


def untrusted(text: object, style: str = "") -> Text:
    """Model-derived ``text`` as a Text that is shown literally: never markup, never a control."""
    return Text(clean(text), style=style, no_wrap=False)


def one_line(text: object, width: int | None = None, style: str = "") -> Text:
    """``untrusted`` on one line (for table cells and titles): newlines shown as ⏎, cut to width."""
    s = clean(text).replace("\n", " \u23ce ")
    if width is not None and len(s) > width:
        s = s[: max(width - 1, 0)] + "\u2026"
    return Text(s, style=style, no_wrap=True, overflow="ellipsis")
