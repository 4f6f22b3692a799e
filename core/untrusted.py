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
"""

from __future__ import annotations

__all__ = ["visible"]

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
