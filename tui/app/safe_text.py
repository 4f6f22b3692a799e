"""The one rule for showing model-derived text in the app: literally, and inert.

Every string that a model, a persona, a judge or a scenario file produced reaches the screen through
``untrusted()``. It returns a ``rich.text.Text``, which Textual never parses for markup (a plain
``str`` in Static, Label, DataTable cells, OptionList, Tree labels or border titles is parsed:
``[/x]`` raises, ``[@click=app.quit]`` becomes a live action, ``[Name]`` vanishes). Control
characters are replaced by visible stand-ins, so an ANSI or OSC sequence (clear screen, cursor
moves, OSC 52 clipboard writes) loses its ESC byte and is shown as the text it is.
"""

from __future__ import annotations

import re

from rich.text import Text

# C0 controls but newline, DEL, C1 controls, and the bidirectional overrides and isolates that
# reorder what is displayed (a reply could make "fail" read as "liaf").
_UNSAFE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _stand_in(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if ch == "\t":
        return "    "
    if code < 0x20:
        return chr(0x2400 + code)  # the Unicode "control pictures": ␛ for ESC, ␇ for BEL
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"<U+{code:04X}>"


def clean(text: object) -> str:
    """``text`` as a string with every control character replaced by a visible stand-in.

    Newlines are kept (a reply has paragraphs); ``\\r\\n`` becomes ``\\n`` and a lone ``\\r`` is
    shown as ␍ because it would move the cursor back over the line.
    """
    s = "" if text is None else str(text)
    s = s.replace("\r\n", "\n")
    return _UNSAFE.sub(_stand_in, s) if _UNSAFE.search(s) else s


def untrusted(text: object, style: str = "") -> Text:
    """Model-derived ``text`` as a Text that is shown literally: never markup, never a control."""
    return Text(clean(text), style=style, no_wrap=False)


def one_line(text: object, width: int | None = None, style: str = "") -> Text:
    """``untrusted`` on one line (for table cells and titles): newlines shown as ⏎, cut to width."""
    s = clean(text).replace("\n", " \u23ce ")
    if width is not None and len(s) > width:
        s = s[: max(width - 1, 0)] + "\u2026"
    return Text(s, style=style, no_wrap=True, overflow="ellipsis")
