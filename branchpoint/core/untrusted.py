"""The one policy for showing untrusted text (model replies, personas, judges, files, providers).

Every surface that shows such text (error lines, ``branchpoint show``, the CLI tables, the app,
the report's HTML and Markdown) passes it through ``visible()`` and only adds what its output type
needs on top (a ``rich.text.Text``, HTML escaping, Markdown escaping). The rule, in one place:

- A character that Unicode calls "Other" or "Separator" (``str.isprintable()`` is false: C0 and C1
  controls, DEL, the bidirectional overrides and isolates, zero-width characters, line and
  paragraph separators, unassigned code points) is written as its Python escape (``\\x1b``,
  ``\\u202e``), so an ANSI or OSC sequence loses its ESC byte and shows as the text it is, a reply
  cannot reorder what is displayed, and a reader can tell that the character was there and which
  one it was (deleting it would hide what the model sent).
- Multi-line text keeps its line breaks (``\\r\\n`` becomes ``\\n``; a lone ``\\r`` would move
  the cursor back over the line, so it is escaped) and shows a tab as four spaces. One-line text
  (``multiline=False``: error lines, table cells) escapes those too.

Markdown (the report's ``report.md``) adds one thing on top, ``markdown()``: the characters that
Markdown would read as markup are backslash-escaped.
"""

from __future__ import annotations

import re

__all__ = ["markdown", "visible"]

_TAB = "    "


def _escape(ch: str) -> str:
    return repr(ch)[1:-1]  # '\x1b', '\u202e', '\r': ASCII, and names the code point


def visible(text: object, *, multiline: bool = True) -> str:
    """``text`` (``None`` as empty) with every character that is not printable written as an escape.

    ``multiline`` keeps line breaks (and shows a tab as four spaces); without it they are escaped
    too, so the result is always one line.
    """
    s = "" if text is None else str(text)
    if s.isprintable():
        return s
    if not multiline:
        return "".join(c if c.isprintable() else _escape(c) for c in s)
    s = s.replace("\r\n", "\n")
    return "".join(
        c if c.isprintable() or c == "\n" else _TAB if c == "\t" else _escape(c) for c in s
    )


# Markdown is not HTML: an entity such as &gt; is shown as typed by plain-text readers, so
# characters that Markdown (or the HTML it allows inline) would interpret are backslash-escaped,
# which CommonMark renders as the character itself and never as markup; so is a "#" that starts
# the text (a heading in a paragraph; in a table cell harmless, escaped as the report always did).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~]|&(?=#?\w+;)|^#)")
# What starts a block at the start of a line (a heading, a list item, a setext underline, an
# ordered list's "1." or "1)"), up to three spaces in: its mark is escaped, so a line of model text
# in a paragraph stays a line of text. A table cell is one line inside a row and starts no block.
_MD_BLOCK = re.compile(r"^( {0,3})(?:([#+=-])|(\d{1,9})([.)]))", re.MULTILINE)


def _unblock(m: re.Match[str]) -> str:
    lead, mark, digits, dot = m.groups()
    return f"{lead}\\{mark}" if mark else f"{lead}{digits}\\{dot}"


def markdown(text: object, *, one_line: bool = False) -> str:
    """``text`` as Markdown that shows it literally: ``visible(text)`` with Markdown escaped on top.

    ``one_line`` (a table cell): a line break becomes a space and every other character is shown as
    on one line; otherwise line breaks are kept and no line can start a heading or a list."""
    if one_line:
        flat = ("" if text is None else str(text)).replace("\r\n", " ").replace("\n", " ")
        return _MD_SPECIAL.sub(r"\\\1", visible(flat, multiline=False))
    return _MD_BLOCK.sub(_unblock, _MD_SPECIAL.sub(r"\\\1", visible(text)))
