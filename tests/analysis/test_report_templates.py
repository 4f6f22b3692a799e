"""The report's HTML and Markdown come from Jinja templates (branchpoint/analysis/templates) rendered in the
project's sandbox: the templates ship with the package, and model text is shown literally in both
documents whatever it holds (markup, script, Markdown, terminal escapes, bidi overrides)."""

from __future__ import annotations

import html
import re
import sqlite3
import tomllib
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest

from branchpoint.analysis.report.sections import Section
from branchpoint.analysis.report.write import render_html, render_markdown, write_report
from branchpoint.analysis.testing.synthetic import Effect, TeenDesign, write_teen_store
from branchpoint.core.untrusted import markdown, visible

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = ("report.html.j2", "report.md.j2")
# A reply that tries every way to become something other than text in a report.
HOSTILE = (
    '<script>alert("x")</script><b>bold</b> [click](http://evil.example) *em* __strong__ '
    "`code` \x1b[31mRED\x1b]0;TITLE\x07 \u202eevil | pipe &amp; ~strike~"
)


def test_the_templates_ship_as_package_data() -> None:
    folder = resources.files("branchpoint.analysis").joinpath("templates")
    for name in TEMPLATES:
        assert folder.joinpath(name).is_file(), name
    # A non-editable install copies them: setuptools finds branchpoint/analysis/templates (namespace
    # packages are on) and the package data of every package includes *.j2.
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setup["packages"]["find"].get("namespaces", True)
    assert "branchpoint*" in setup["packages"]["find"]["include"]
    assert "*.j2" in setup["package-data"]["*"]


def test_the_templates_mark_nothing_safe() -> None:
    for name in TEMPLATES:
        text = (
            resources.files("branchpoint.analysis").joinpath("templates", name).read_text("utf-8")
        )
        assert "|safe" not in text.replace(" ", "") and "Markup" not in text, name


def _shown_in_html(page: str) -> str:
    """What a browser shows as text: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]*>", "", page))


def _shown_in_markdown(md: str) -> str:
    """What a CommonMark reader shows for backslash-escaped text: the escaped characters."""
    return re.sub(r"\\(.)", r"\1", md)


def _no_raw_markup_or_controls(page: str, md: str) -> None:
    for raw in ("<script", "<b>", "\x1b", "\x07", "\u202e"):
        assert raw not in page, raw
    assert "\x1b" not in md and "\x07" not in md and "\u202e" not in md
    assert re.search(r"(?<!\\)<(?!!)", md) is None  # every < in Markdown is backslash-escaped


def test_hostile_text_in_every_field_is_shown_literally() -> None:
    section = Section(f"Section {HOSTILE}", text=[f"Paragraph {HOSTILE}"])
    section.plot = ("p.png", None, f"why {HOSTILE}")
    section.tables.append(
        (f"Caption {HOSTILE}", pd.DataFrame({f"column {HOSTILE}": [f"cell {HOSTILE}", None]}))
    )
    section.links.append((f"label {HOSTILE}", "pages/x.html"))
    page = render_html([section], f"Title {HOSTILE}")
    md = render_markdown([section], f"Title {HOSTILE}")
    one_line = visible(HOSTILE, multiline=False)
    assert one_line != HOSTILE  # the escapes and the override are written as visible escapes
    _no_raw_markup_or_controls(page, md)
    shown = _shown_in_html(page)
    for where in ("Title", "Section", "Paragraph", "why", "Caption", "column", "cell", "label"):
        assert f"{where} {one_line}" in shown, where
    assert "<a href='pages/x.html'>" in page  # the project's own markup stays markup
    # Markdown: every special character is escaped, so a reader shows the text as it came
    shown = _shown_in_markdown(md)
    for where in ("Title", "Section", "Paragraph", "why", "Caption", "column", "cell", "label"):
        assert f"{where} {one_line}" in shown, where
    assert "\\[click\\](http://evil.example) \\*em\\* \\_\\_strong\\_\\_ \\`code\\`" in md
    assert "\\<script\\>" in md and "\\\\x1b\\[31m" in md and "\\\\u202eevil \\| pipe \\&amp;" in md


def test_html_tables_are_laid_out_as_pandas_wrote_them() -> None:
    """The template writes a table as DataFrame.to_html did (numbers in pandas' formats, a pair
    of spaces kept, a line break shown as \\n), with the escaping done by the sandbox."""
    df = pd.DataFrame({
        "n": [1, 2, 3], "f": [0.5, float("nan"), 1.25], "mixed": [2, float("nan"), "s"],
        "flag": [True, False, True], "text": ["a  b <i>", None, "two\nlines\ttab"],
    })  # fmt: skip
    page = render_html([Section("s", tables=[("t", df)])], "t")
    assert (
        df.map(lambda v: visible(v) if isinstance(v, str) else v).to_html(
            index=False, escape=True, na_rep="", border=0
        )
        in page
    )
    assert "<td>a&nbsp;&nbsp;b &lt;i&gt;</td>" in page and "<td>0.50</td>" in page


def test_a_line_of_model_text_starts_no_markdown_block() -> None:
    text = "fine\n# Heading\n- item\n+ item\n  12. item\n3) item\n===\n---\n> quote"
    md = markdown(text)
    assert md == (
        "fine\n\\# Heading\n\\- item\n\\+ item\n  12\\. item\n3\\) item\n\\===\n\\---\n\\> quote"
    )
    # A table cell is one line in a row: the same text on one line, line breaks as spaces
    assert markdown(text, one_line=True).startswith("fine # Heading - item")
    # Numbers in cells and paragraphs that start no block are left as they were
    assert markdown("-1.5 points", one_line=True) == "-1.5 points"
    assert markdown("3 conversations (runs: a).") == "3 conversations (runs: a)."


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "teen.db"
    design = TeenDesign(
        n_scenarios=6, targets=("scripted:a", "scripted:b"), n_exchanges=3,
        effects=(Effect("limit", "push_back", ("no_diagnosis",), 0.3),),
    )  # fmt: skip
    write_teen_store(path, design, seed=3)
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE turns SET content = ? WHERE role = 'assistant'", (HOSTILE,))
    con.close()
    return path


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_a_report_of_a_store_with_hostile_replies_shows_them_literally(
    hostile_db: Path, tmp_path: Path
) -> None:
    files = write_report(hostile_db, tmp_path / "rep", n_boot=50)
    page = files.html.read_text(encoding="utf-8")
    md = files.markdown.read_text(encoding="utf-8")
    _no_raw_markup_or_controls(page, md)
    one_line = visible(HOSTILE, multiline=False)
    # The failing examples' table shows the reply as it came, in both documents.
    assert one_line in _shown_in_html(page)
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in page
    assert one_line in _shown_in_markdown(md)
    assert markdown(HOSTILE, one_line=True) in md
    assert md.endswith("\n") and not md.endswith("\n\n")
