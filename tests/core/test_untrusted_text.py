"""One untrusted-text policy: every surface that shows model or file text shows it the same way.

The same hostile inputs go through each surface's wrapper (error lines, ``branchpoint show``, the
CLI tables, the app, the report's HTML and Markdown, the batch judge's progress lines) and must come
out as ``branchpoint.core.untrusted.visible`` shows them, plus only what the output type adds.
"""

from __future__ import annotations

import re

import pytest
from markupsafe import escape

from branchpoint.core.templates import html_template, markdown_template
from branchpoint.core.untrusted import markdown, visible
from branchpoint.core.yamlio import LoadError
from branchpoint.judges.batch_judging import _printable as batch_printable
from branchpoint.simulator.transcript import safe_text
from branchpoint.tui.app.safe_text import clean, one_line, untrusted
from branchpoint.tui.commands.analysis_cmds import _printable as analysis_printable
from branchpoint.tui.commands.labels_cmds import _cell as labels_cell

# (input, how it is shown on one line): ESC sequences, an OSC title set, BEL, CR, a bidi override,
# a zero-width space, NUL, C1 controls (CSI and NEL), a line separator, a tab.
HOSTILE = [
    ("a\x1b[2J\x1b[31;7mRED\x1b[0m", "a\\x1b[2J\\x1b[31;7mRED\\x1b[0m"),
    ("\x1b]0;TITLEPWN\x07 end", "\\x1b]0;TITLEPWN\\x07 end"),
    ("ring\x07", "ring\\x07"),
    ("over\rwrite", "over\\rwrite"),
    ("fail \u202eliaf", "fail \\u202eliaf"),
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("nul\x00byte", "nul\\x00byte"),
    ("c1\x9b31m and \x85 next", "c1\\x9b31m and \\x85 next"),
    ("line\u2028sep", "line\\u2028sep"),
    ("tab\there", "tab\\there"),
    ("plain text [bold]x[/]", "plain text [bold]x[/]"),
]
IDS = [repr(raw)[:24] for raw, _ in HOSTILE]


def md_escape(text: str) -> str:
    """Markdown's special characters backslash-escaped (what the Markdown report adds)."""
    return re.sub(r"([\\`*_\[\]<>|~])", r"\\\1", text)


@pytest.mark.parametrize(("raw", "shown"), HOSTILE, ids=IDS)
def test_one_line_surfaces_show_the_same_visible_form(raw: str, shown: str) -> None:
    assert visible(raw, multiline=False) == shown
    assert all(c.isprintable() for c in shown)
    error = LoadError("f.yaml", 1, 1, raw, raw)
    assert str(error) == f"f.yaml:1:1: {shown}: {shown}"
    assert batch_printable(raw) == shown
    assert analysis_printable(raw) == shown
    assert labels_cell(raw, 200).rstrip() == shown.rstrip()
    assert markdown(raw, one_line=True) == md_escape(shown)  # Markdown escaping on top, only
    assert markdown_template("{{ t|md_cell }}").render(t=raw) == md_escape(shown)  # report.md


@pytest.mark.parametrize(("raw", "shown"), HOSTILE, ids=IDS)
def test_multi_line_surfaces_show_the_same_visible_form(raw: str, shown: str) -> None:
    text = f"first line\r\n{raw}\nlast"
    # Multi-line text keeps its line breaks and shows a tab as spaces; the rest is as on one line.
    expected = "first line\n" + shown.replace("\\t", "    ") + "\nlast"
    assert visible(text) == expected
    assert safe_text(text) == expected  # branchpoint show
    assert clean(text) == expected and untrusted(text).plain == expected  # the app
    assert not untrusted(text).spans  # never parsed as markup
    assert one_line(text).plain == expected.replace("\n", " \u23ce ")
    # The report's documents: HTML (and Markdown) escaping on top, nothing else
    assert html_template("{{ t|visible }}").render(t=text) == escape(expected)
    assert markdown(text) == md_escape(expected)
    assert markdown_template("{{ t|md }}").render(t=text) == md_escape(expected)
    assert all(c.isprintable() or c == "\n" for c in expected)


def test_nothing_and_printable_text_pass_unchanged() -> None:
    assert visible(None) == "" and safe_text(None) == "" and clean(None) == ""
    for text in ("", "plain", "naïve café 東京 🙂", "<b>&amp;</b>"):
        assert visible(text) == text and visible(text, multiline=False) == text
