"""Static transcript pages for the report's failing examples: escaped, highlighted, offline."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from fixtures.engine.judged_run import judged_run

SCRIPT = '<script>alert("pwned")</script>'


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    from branchpoint.core.store import open_store

    folder = tmp_path_factory.mktemp("pages")
    db = folder / "run.db"
    store = open_store(str(db))
    try:
        run_id = judged_run(store, folder)
    finally:
        store.close()
    con = sqlite3.connect(db)
    with con:  # model text that would be markup, and a judge quoting it as evidence
        con.execute(
            "UPDATE turns SET content = content || ' ' || ? WHERE role = 'assistant'", (SCRIPT,)
        )
        con.execute(
            "UPDATE judgments SET evidence = ?, rationale = 'says <b>UNSAFE</b>' "
            "WHERE verdict = 'fail'",
            ('[{"quote": "UNSAFE reply <script>", "verified": true}]',),
        )
    con.close()
    return db, run_id


def _failing_conversation(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return str(
            con.execute("SELECT conversation_id FROM judgments WHERE verdict = 'fail'").fetchone()[
                0
            ]
        )
    finally:
        con.close()


def test_a_page_escapes_model_text_and_highlights_the_evidence(
    run: tuple[Path, str], tmp_path: Path
) -> None:
    from branchpoint.analysis.export.pages import write_transcript_pages

    db, _run = run
    cid = _failing_conversation(db)
    pages = write_transcript_pages(db, [cid, "no-such-conversation"], tmp_path)
    assert set(pages) == {cid}
    page = pages[cid].read_text(encoding="utf-8")
    assert "<script" not in page and "<b>UNSAFE" not in page
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in page
    assert "<mark>UNSAFE reply &lt;script&gt;</mark>" in page  # the quote, highlighted, escaped
    assert 'class="badge v-fail">fail</span> unsafe_reply' in page
    assert "says &lt;b&gt;UNSAFE&lt;/b&gt;" in page  # the rationale, literally
    assert "default-src 'none'" in page  # no script, no remote content: opens offline
    assert not re.search(r"(src|href)=[\"']?https?:", page)
    assert page.count('class="msg assistant failing') >= 1


def test_highlight_merges_overlaps_and_keeps_every_character() -> None:
    from branchpoint.analysis.export.pages import highlight

    text = "abc UNSAFE def UNSAFE"
    segs = highlight(text, ["UNSAFE", "SAFE d", ""])
    assert "".join(s for s, _ in segs) == text
    assert [s for s, marked in segs if marked] == ["UNSAFE d", "UNSAFE"]
    assert highlight("", ["x"]) == [("", False)]


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_the_report_links_each_failing_example_to_its_page(
    run: tuple[Path, str], tmp_path: Path
) -> None:
    from branchpoint.analysis.report.write import write_report

    db, run_id = run
    files = write_report(db, tmp_path / "report", run_id, n_boot=0)
    html = files.html.read_text(encoding="utf-8")
    links = re.findall(r"<a href='(transcripts/[^']+)'>", html)
    assert links, "no transcript links in report.html"
    for link in links:
        page = tmp_path / "report" / link.split("#")[0]
        assert page.is_file()
        assert "../report.html" in page.read_text(encoding="utf-8")
    md = files.markdown.read_text(encoding="utf-8")
    assert "(transcripts/" in md and "Transcripts of the failing examples" in md
