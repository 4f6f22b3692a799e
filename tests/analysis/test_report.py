"""Reports and the export / analyze / report commands on real synthetic stores."""

from __future__ import annotations

import re
import sqlite3
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from fixtures.engine.helpers import run_cli
from typer.testing import CliRunner

from branchpoint.analysis.testing.synthetic import (
    EDDesign,
    Effect,
    TeenDesign,
    write_ed_store,
    write_teen_store,
)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = '<script>alert("pwned")</script>'
EVIL_TARGET = "scripted:<img src=x onerror=alert(1)>[red]loud[/red]"


@pytest.fixture(scope="module")
def teen_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "teen.db"
    design = TeenDesign(
        n_scenarios=12, targets=("scripted:a", "scripted:b", "scripted:c"), n_exchanges=4, reasoning=True,
        effects=(Effect("limit", "push_back", ("no_diagnosis",), 0.2),),
    )  # fmt: skip
    write_teen_store(path, design, seed=2)
    con = sqlite3.connect(path)
    with con:
        con.execute(
            "UPDATE turns SET content = ? || ' ' || content WHERE role = 'assistant'", (SCRIPT,)
        )
        con.execute(
            "UPDATE conversations SET target = ? WHERE target = 'scripted:c'", (EVIL_TARGET,)
        )
        # Human labels for one conversation: the judge's own verdicts, one changed to more risk.
        rows = con.execute(
            "SELECT conversation_id, turn_id, turn_index, rubric_id, criterion_id, verdict FROM judgments "
            "WHERE conversation_id = (SELECT MIN(conversation_id) FROM judgments) AND applicable"
        ).fetchall()
        for i, (cid, tid, ti, rub, crit, verdict) in enumerate(rows):
            label = "fail" if i == 0 else verdict
            con.execute(
                "INSERT INTO human_labels (id, conversation_id, turn_id, turn_index, rubric_id, criterion_id, annotator, "
                "verdict, note, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (f"h{i}", cid, tid, ti, rub, crit, "clin1", label, "", "2026-01-01 00:00:00"),
            )
    con.close()
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=600)


@pytest.mark.slow
def test_report_has_every_plot_headline_first_and_escaped_text(
    teen_db: Path, tmp_path: Path
) -> None:
    from branchpoint.tui.cli import app

    out = tmp_path / "rep"
    res = CliRunner().invoke(
        app,
        ["report", "synthetic-teen", "--out", str(out), "--db", str(teen_db), "--n-boot", "200"],
    )
    assert res.exit_code == 0, res.output
    assert f"report: {out / 'report.html'}" in res.output
    for name in (
        "failure_by_target_condition.png",
        "criterion_heatmap.png",
        "forest_contrasts.png",
        "time_to_failure.png",
    ):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    # Four plots embedded (the time-to-failure curves too); the ED plot has no data and the
    # report says so instead of vanishing.
    assert len(re.findall(r"src='data:image/png;base64,", page)) == 4
    assert (
        "No plot: no risk-level (ED) judgments" in page
        and "No plot: no risk-level (ED) judgments" in md
    )
    assert "ed_safety.png" in res.output
    # Model text and spec strings are escaped everywhere.
    assert "<script" not in page and "<img src=x" not in page
    assert (
        "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page
        or "&lt;script&gt;alert(" in page
    )
    # Markdown is not HTML: model text is backslash-escaped, never turned into entities.
    assert re.search(r"(?<!\\)<", md) is None and "\\<script\\>alert" in md
    assert "&lt;" not in md and "&gt;" not in md and "&quot;" not in md
    # Headline findings first: overall rates, then the biggest contrast (the planted one).
    assert (
        page.index("Headline findings")
        < page.index("Failure rate by target and condition")
        < page.index("Matched contrasts</h2>")
    )
    head = page[
        page.index("Headline findings") : page.index("Failure rate by target and condition")
    ]
    assert "Overall failure rate" in head and "Error verdicts" in head
    # The contrasts come sorted by the primary (scenario-level, Holm) p-value; the planted one is
    # among them, and the methods (test, adjustment, sign convention) are stated up front.
    first_contrast = head[head.index("Largest matched contrasts") :]
    assert "limit: accept_limit → push_back" in first_contrast
    assert "p scenario-level (Holm)" in first_contrast and "not cluster-adjusted" in first_contrast
    assert "Methods and conventions" in page and "Sign convention" in md
    assert "minus the baseline" in md and "Holm" in md
    # Agreement with the human labels and the reasoning section are there.
    assert "human:clin1" in page
    assert "Failing replies whose reasoning noticed the risk" in page


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_ed_report_has_the_ed_plot(tmp_path: Path) -> None:
    from branchpoint.analysis.report.write import write_report

    db = tmp_path / "ed.db"
    write_ed_store(db, EDDesign(n_questions=6), seed=1, inject=SCRIPT)
    files = write_report(db, tmp_path / "r", n_boot=100)
    assert [p.name for p in files.plots] == ["ed_safety.png"]
    assert set(files.missing_plots) == {
        "failure_by_target_condition.png",
        "criterion_heatmap.png",
        "forest_contrasts.png",
        "time_to_failure.png",  # risk levels have no failing verdict to time
    }
    page = files.html.read_text()
    assert "ED safety score" in page and "No plot: no applicable pass/partial/fail ratings" in page
    assert "<script" not in page


def test_analyze_prints_headlines_literally(teen_db: Path) -> None:
    from branchpoint.tui.cli import app

    res = CliRunner().invoke(
        app, ["analyze", "--all", "--db", str(teen_db), "--n-boot", "100"], env={"COLUMNS": "400"}
    )
    assert res.exit_code == 0, res.output
    assert "Overall failure rate" in res.output
    assert "limit: accept_limit → push_back" in res.output
    assert "[red]loud[/red]" in res.output  # Rich markup in a spec string is printed, not applied


def test_export_csv_and_parquet(teen_db: Path, tmp_path: Path) -> None:
    from branchpoint.tui.cli import app

    n = sqlite3.connect(teen_db).execute("SELECT COUNT(*) FROM judgments").fetchone()[0]
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"t.{fmt}"
        res = CliRunner().invoke(
            app,
            ["export", "synthetic-teen", "--format", fmt, "--out", str(out), "--db", str(teen_db)],
        )
        assert res.exit_code == 0, res.output
        df = pd.read_csv(out) if fmt == "csv" else pd.read_parquet(out)
        assert len(df) == n
        assert {
            "choice:limit",
            "choice:help",
            "choice:disclosure",
            "target",
            "condition",
            "criterion_id",
            "verdict",
            "exchange",
        } <= set(df.columns)
        assert not any("key" in c.lower() for c in df.columns)
    res = CliRunner().invoke(
        app,
        [
            "export",
            "--all",
            "--level",
            "conversation",
            "--out",
            str(tmp_path / "c.csv"),
            "--db",
            str(teen_db),
        ],
    )
    assert res.exit_code == 0 and "n_fail" in pd.read_csv(tmp_path / "c.csv").columns


@pytest.mark.slow
def test_bad_input_is_one_line_without_traceback(teen_db: Path, tmp_path: Path) -> None:
    cases = [
        (["analyze", "nope", "--db", str(teen_db)], "run 'nope' is not in the store"),
        (["analyze", "--db", str(teen_db)], "give a RUN id or --all"),
        (
            [
                "export",
                "--all",
                "--format",
                "xlsx",
                "--out",
                str(tmp_path / "x"),
                "--db",
                str(teen_db),
            ],
            "expected csv, parquet, jsonl or inspect",
        ),
        (["report", "--all", "--db", str(tmp_path / "missing.db")], "no such store"),
        (
            ["analyze", "--all", "--baseline", "limit", "--db", str(teen_db)],
            "expected BRANCH_POINT=OPTION",
        ),
    ]
    for args, message in cases:
        proc = _cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.strip().startswith("error: ") and message in proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_two_judges_are_reported_side_by_side(teen_db: Path, tmp_path: Path) -> None:
    import shutil

    from branchpoint.analysis.report.write import run_analysis, write_report

    db = tmp_path / "two.db"
    shutil.copy(teen_db, db)
    con = sqlite3.connect(db)
    with con:
        cols = [r[1] for r in con.execute("PRAGMA table_info(judgments)")]
        sel = ", ".join(f'"{c}"' for c in cols)
        heur = sel.replace('"id"', "id || ':h'").replace('"judge"', "'heuristic'")
        con.execute(f"INSERT INTO judgments ({sel}) SELECT {heur} FROM judgments")
    con.close()
    a = run_analysis(db, n_boot=50, examples=0)
    assert a.primary_judge == "scripted:judge"
    assert set(a.rates_condition["judge"]) == {"scripted:judge", "heuristic"}
    assert a.agreement is not None and (a.agreement.pairs["kind"] == "judge vs judge").any()
    files = write_report(db, tmp_path / "r", analysis=a)
    page = files.html.read_text()
    assert "Several judges rated these runs" in page and len(files.plots) == 4  # + time to failure
    head = page[: page.index("Failure rate by target and condition</h2>")]
    assert "<th>judge</th>" in head and "heuristic" in head


def test_chunked_export_equals_the_judgment_table(teen_db: Path, tmp_path: Path) -> None:
    from branchpoint.analysis.tables.judgments import export_judgments, judgment_table

    ref = judgment_table(teen_db).sort_values("judgment_id").reset_index(drop=True)
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"x.{fmt}"
        assert export_judgments(teen_db, out, fmt, chunksize=777) == len(ref)
        got = (
            (pd.read_csv(out) if fmt == "csv" else pd.read_parquet(out))
            .sort_values("judgment_id")
            .reset_index(drop=True)
        )
        assert list(got.columns) == list(ref.columns)
        for col in ("judgment_id", "verdict", "target", "choice:limit", "criterion_id"):
            assert (got[col].fillna("").astype(str) == ref[col].fillna("").astype(str)).all(), (
                fmt,
                col,
            )
        assert (got["turn_index"].to_numpy() == ref["turn_index"].to_numpy()).all()
        assert (got["applicable"].astype(bool).to_numpy() == ref["applicable"].to_numpy()).all()


def test_analyze_is_readable_at_80_columns(teen_db: Path) -> None:
    """Was a contrast table squeezed into cells one or two characters wide."""
    from branchpoint.tui.cli import app

    res = CliRunner().invoke(
        app, ["analyze", "--all", "--db", str(teen_db), "--n-boot", "100"], env={"COLUMNS": "80"}
    )
    assert res.exit_code == 0, res.output
    assert "limit: accept_limit → push_back" in res.output  # a contrast label kept whole
    assert "distinct ratings" in res.output


def test_analyze_format_json_for_scripts(teen_db: Path) -> None:
    import json

    from branchpoint.tui.cli import app

    res = CliRunner().invoke(
        app, ["analyze", "--all", "--db", str(teen_db), "--n-boot", "100", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["n_conversations"] > 0 and out["n_ratings"] > 0
    rows = out["contrasts"]["contrasts"]
    assert any(r["contrast"] == "limit: accept_limit → push_back" for r in rows)
    assert {"diff", "ci_low", "ci_high", "p_scenario", "interval", "test"} <= set(rows[0])
    assert out["rates"] and "interval" in out["rates"][0]
    proc = _cli("analyze", "--all", "--db", str(teen_db), "--format", "xml")
    assert proc.returncode == 2 and "expected text or json" in proc.stderr
