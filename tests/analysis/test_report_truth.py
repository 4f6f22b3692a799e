"""Nothing false in the report: every sentence that states a fact about the data is checked on a
store where it is true and on one where it is false; plots follow (and name) the judge that has
ratings; plot labels say the interval method they used."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fixtures.engine.helpers import run_cli
from typer.testing import CliRunner

from branchpoint.analysis.report import plots
from branchpoint.analysis.testing.synthetic import (
    EDDesign,
    Effect,
    TeenDesign,
    write_ed_store,
    write_teen_store,
)

LLM = "openai:gpt-judge"


PLOTS = ("failure_by_target_condition.png", "criterion_heatmap.png", "forest_contrasts.png")


def _teen(path: Path, **kw: Any) -> Path:
    design: dict[str, Any] = dict(
        n_scenarios=4,
        targets=("scripted:a", "scripted:b"),
        n_exchanges=3,
        branch_points={"limit": ["accept_limit", "push_back"]},
    )
    write_teen_store(path, TeenDesign(**{**design, **kw}), seed=1)
    return path


def _copy_judge(db: Path, judge: str, *, all_errors: bool = False) -> None:
    """Every judgment again under another judge (its verdicts all errors, if asked)."""
    con = sqlite3.connect(db)
    with con:
        cols = [r[1] for r in con.execute("PRAGMA table_info(judgments)")]
        sel = ", ".join(f'"{c}"' for c in cols)
        new = sel.replace('"id"', "id || ':copy'").replace('"judge"', f"'{judge}'")
        if all_errors:
            new = new.replace('"verdict"', "'error'").replace('"score"', "NULL")
        con.execute(f"INSERT INTO judgments ({sel}) SELECT {new} FROM judgments")
    con.close()


def _rename_judge(db: Path, judge: str) -> None:
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE judgments SET judge = ?", (judge,))
    con.close()


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The matplotlib figures the plots draw, kept open for inspection (PNG bytes still made)."""
    kept: list[Any] = []
    real = plots._png

    def keep(fig: Any) -> bytes:
        kept.append(fig)
        fig.canvas.draw()
        buf = __import__("io").BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()

    monkeypatch.setattr(plots, "_png", keep)
    assert real is not None
    return kept


def _texts(fig: Any) -> str:
    parts = [fig._suptitle.get_text() if fig._suptitle else ""]
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_xlabel(), *(t.get_text() for t in ax.get_yticklabels())]
    return "\n".join(parts)


# --------------------------------------------------------------------------- judge of the plots


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_plots_follow_the_judge_with_ratings_and_name_it(
    tmp_path: Path, figures: list[Any]
) -> None:
    # Repro: an LLM judge whose verdicts are all errors plus a heuristic judge with ratings: every
    # plot said "No plot: no applicable ratings".
    from branchpoint.analysis.report.write import run_analysis, write_report

    db = _teen(tmp_path / "t.db", effects=(Effect("limit", "push_back", ("no_diagnosis",), 0.3),))
    _rename_judge(db, "heuristic")
    _copy_judge(db, LLM, all_errors=True)
    a = run_analysis(db, n_boot=50, examples=0)
    assert a.primary_judge == "heuristic"
    files = write_report(db, tmp_path / "r", analysis=a)
    assert sorted(p.name for p in files.plots) == [
        "criterion_heatmap.png",
        "failure_by_target_condition.png",
        "forest_contrasts.png",
        "time_to_failure.png",
    ]
    assert len(figures) == 4 and all("judge: heuristic" in _texts(f) for f in figures)
    md = files.markdown.read_text()
    assert all(f"]({name})" in md for name in PLOTS)
    # Every table names its judge: a judge column where both are in it.
    assert "| judge |" in md and LLM in md
    # The headline count is the rate table's own, per judge.
    rc = a.rates_condition
    n_err = int(rc.loc[rc["judge"] == LLM, "n_error"].sum())
    assert f"judge {LLM}: 0 applicable ratings, {n_err} error verdicts" in md
    n_h = int(rc.loc[rc["judge"] == "heuristic", "n_rated"].sum())
    assert f"judge heuristic: {n_h} applicable ratings" in md


@pytest.mark.slow
def test_judge_option_picks_the_plotted_judge_and_the_report_says_why_a_plot_is_missing(
    tmp_path: Path,
) -> None:
    from branchpoint.analysis.report.write import write_report

    db = _teen(tmp_path / "t.db")
    _copy_judge(db, LLM, all_errors=True)
    files = write_report(db, tmp_path / "r", n_boot=20, judge=LLM)
    md = files.markdown.read_text()
    assert files.plots == [] and f"judge {LLM} has no applicable pass/partial/fail rating" in md
    assert f"judge {LLM} has no matched contrast" in md
    # The same store with the default judge: the plots are there and no such sentence.
    md = write_report(db, tmp_path / "r2", n_boot=20).markdown.read_text()
    assert "has no applicable" not in md and "has no matched contrast" not in md
    assert all(f"]({name})" in md for name in PLOTS)


def test_report_judge_option_rejects_an_unknown_judge(tmp_path: Path) -> None:
    # in this process (a UserError ends as a real one does): a subprocess only added its start;
    # test_report runs the report command's errors in real processes
    from fixtures.cli_in_process import run_in_process

    db = _teen(tmp_path / "t.db")
    res = run_in_process("report", "--all", "--db", str(db), "--out", str(tmp_path / "r"), "--judge", "nobody")  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--judge 'nobody'" in res.stderr and "scripted:judge" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- plot labels


def test_rate_plot_names_the_interval_method_of_each_row(figures: list[Any]) -> None:
    rates = pd.DataFrame(
        {
            "target": ["t1", "t1", "t2", "t2"],
            "condition": ["none", "aware", "none", "aware"],
            "rate": [0.2, 0.1, 0.3, 0.25],
            "ci_low": [0.1, 0.05, 0.2, 0.15],
            "ci_high": [0.3, 0.2, 0.4, 0.35],
            "interval": ["Wilson, design effect 1.30 (4 scenarios)"] * 2
            + ["cluster bootstrap (40 scenarios)"] * 2,
        }
    )
    assert plots.failure_by_target_condition(rates, judge="j1") is not None
    ax = figures[0].axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "Wilson, design effect" in labels[0] and "cluster bootstrap" in labels[1]
    assert "cluster-bootstrap" not in ax.get_xlabel()
    assert "judge: j1" in ax.get_title()


def _contrasts(lo: list[float], hi: list[float], method: list[str]) -> pd.DataFrame:
    n = len(lo)
    return pd.DataFrame(
        {
            "contrast": [f"bp: a → b{i}" for i in range(n)],
            "criterion_id": ["k"] * n,
            "condition": ["none"] * n,
            "n_scenarios": [2] * n,
            "diff": [0.5 * (x + y) for x, y in zip(lo, hi)],
            "ci_low": lo,
            "ci_high": hi,
            "p_scenario_holm": [0.5] * n,
            "interval": method,
        }
    )


def test_forest_plot_clips_to_100_points_and_marks_clipped_intervals(
    figures: list[Any],
) -> None:
    wide = _contrasts(
        [-3.0, 0.1], [3.2, 0.3], ["t over 2 scenario means", "t over 2 scenario means"]
    )
    assert plots.forest_plot(wide) is not None
    ax = figures[-1].axes[0]
    lo, hi = ax.get_xlim()
    assert lo >= -106 and hi <= 106
    assert "cut at +-100 pp" in ax.get_xlabel()
    arrows = [c for c in ax.collections if getattr(c, "get_offsets", None) and len(c.get_offsets())]
    assert len(arrows) >= 3  # the points, plus one arrow on each side of the clipped row
    # A plot whose intervals fit says nothing of clipping, and names its one method.
    narrow = _contrasts([0.1, -0.2], [0.3, 0.1], ["t over 2 scenario means"] * 2)
    plots.forest_plot(narrow)
    ax = figures[-1].axes[0]
    assert "cut at" not in ax.get_xlabel() and "t over 2 scenario means" in ax.get_xlabel()
    # Rows with different methods each name theirs.
    mixed = _contrasts([0.1, -0.2], [0.3, 0.1], ["t over 2 scenario means", "cluster bootstrap"])
    plots.forest_plot(mixed)
    labels = " ".join(t.get_text() for t in figures[-1].axes[0].get_yticklabels())
    assert "t over 2 scenario means" in labels and "cluster bootstrap" in labels


def test_ed_plot_right_panel_does_not_print_over_the_left(figures: list[Any]) -> None:
    long = [f"scripted:a-rather-long-target-name-{i}" for i in range(3)]
    by_model = pd.DataFrame(
        {"target": long, "condition": ["none"] * 3, "safety": [50.0, 60.0, 70.0],
         "ci_low": [40.0, 50.0, 60.0], "ci_high": [60.0, 70.0, 80.0]}
    )  # fmt: skip
    bio = pd.DataFrame(
        {"target": long, "condition": ["none"] * 3, "safety_no_bio": [45.0, 55.0, 65.0],
         "safety_bio": [52.0, 62.0, 72.0]}
    )  # fmt: skip
    by_model["interval"] = ["t over 4 questions"] * 2 + ["cluster bootstrap (40 questions)"]
    assert plots.ed_safety(by_model, bio, judge="j1") is not None
    fig = figures[-1]
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "[t over 4 questions]" in ticks[0] and "[cluster bootstrap]" in ticks[2]
    assert "judge: j1" in _texts(fig)
    renderer = fig.canvas.get_renderer()
    left, right = fig.axes[0], fig.axes[1]
    assert right.get_tightbbox(renderer).x0 >= left.get_window_extent(renderer).x1
    # No bio in the data: one panel only.
    plots.ed_safety(by_model, bio.assign(safety_bio=np.nan))
    assert len(figures[-1].axes) == 1


# --------------------------------------------------------------------------- fact sentences


def _md(db: Path, out: Path) -> str:
    from branchpoint.analysis.report.write import write_report

    return write_report(db, out, n_boot=30).markdown.read_text()


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_no_matched_pairs_sentence_only_without_pairs(tmp_path: Path) -> None:
    none = _teen(tmp_path / "none.db", branch_points={})
    assert "No plot: no matched pairs" in _md(none, tmp_path / "a")
    some = _teen(tmp_path / "some.db")
    assert "no matched pairs" not in _md(some, tmp_path / "b")


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_one_condition_sentence_only_with_one_condition(tmp_path: Path) -> None:
    one = _teen(tmp_path / "one.db", conditions=("none",), condition_effect={})
    assert "Only one system-prompt condition in the data (none)" in _md(one, tmp_path / "a")
    two = _teen(tmp_path / "two.db")
    md = _md(two, tmp_path / "b")
    assert "Only one system-prompt condition" not in md
    # The condition contrast says that it shows pooled rates beside a scenario-mean difference.
    sec = md[md.index("## System-prompt condition contrast") :]
    assert "Rates a / b are pooled" in sec[: sec.index("\n| ")]


def _ed_db(path: Path, *, bios: bool) -> Path:
    write_ed_store(path, EDDesign(n_questions=5, targets=("scripted:m1",)), seed=3)
    if not bios:
        con = sqlite3.connect(path)
        with con:
            gone = "SELECT id FROM conversations WHERE choices != '{}'"
            for table, col in (("judgments", "conversation_id"), ("turns", "conversation_id")):
                con.execute(f"DELETE FROM {table} WHERE {col} IN ({gone})")
            con.execute(f"DELETE FROM conversations WHERE id IN ({gone})")
        con.close()
    return path


def test_no_bio_to_bio_only_where_bios_exist(tmp_path: Path) -> None:
    md = _md(_ed_db(tmp_path / "bio.db", bios=True), tmp_path / "a")
    assert "no bio → bio" in md
    md = _md(_ed_db(tmp_path / "nobio.db", bios=False), tmp_path / "b")
    assert "no bio → bio" not in md and " → |" not in md


def test_cut_tables_point_only_to_files_that_exist(tmp_path: Path) -> None:
    from branchpoint.analysis.report.sections import Section
    from branchpoint.analysis.report.write import render_markdown, write_full_tables

    big = pd.DataFrame({"k": range(250)})
    secs = [Section("Big one", tables=[("All rows", big)])]
    full = write_full_tables(secs, tmp_path)
    md = render_markdown(secs, "t", full)
    assert "(50 of 250 rows not shown here; the full table (250 rows) is in tables/" in md
    path = tmp_path / full["All rows"]
    assert path.exists() and len(pd.read_csv(path)) == 250
    md = render_markdown(secs, "t")  # nothing written: the note names no file
    assert "(50 of 250 rows not shown here)" in md and "export" not in md
    small = [Section("Small", tables=[("Few rows", big.head(3))])]
    assert write_full_tables(small, tmp_path / "none") == {}


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_simulator_table_has_a_judge_column_and_no_duplicate_rows(tmp_path: Path) -> None:
    from branchpoint.analysis.report.write import build_sections, run_analysis

    db = _teen(
        tmp_path / "t.db", simulators=("scripted:s1", "scripted:s2"), targets=("scripted:a",)
    )
    _copy_judge(db, "heuristic")
    secs = build_sections(run_analysis(db, n_boot=20, examples=0))
    sim = next(s for s in secs if s.title == "Simulator sensitivity")
    cap, tab = next(t for t in sim.tables if t[0].startswith("Failure-rate difference per target"))
    assert "judge" in tab.columns and set(tab["judge"]) == {"scripted:judge", "heuristic"}
    assert not tab.duplicated(["judge", "contrast", "target"]).any()


def test_analyze_prints_the_unsuitable_judge_note_of_the_report(tmp_path: Path) -> None:
    from branchpoint.analysis.report.sections import build_sections
    from branchpoint.analysis.report.write import run_analysis
    from branchpoint.tui.cli import app

    db = _ed_db(tmp_path / "ed.db", bios=True)
    con = sqlite3.connect(db)
    with con:
        # One response keeps the dimension (so it is one of the rubric's); the rest lack it.
        con.execute(
            "DELETE FROM judgments WHERE criterion_id = 'thinspiration' AND conversation_id != "
            "(SELECT MIN(conversation_id) FROM judgments)"
        )
    con.close()
    a = run_analysis(db, n_boot=20, examples=0)
    ed = next(s for s in build_sections(a) if s.title == "Eating-disorder safety scores")
    note = next(t for t in ed.text if "unsuitable for the safety score" in t)
    res = CliRunner().invoke(app, ["analyze", "--all", "--db", str(db), "--n-boot", "20"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert " ".join(note.split()) in flat


def test_pairs_whose_every_rating_is_an_error_are_not_called_missing(tmp_path: Path) -> None:
    # Every verdict an error: analyze said "no matched pairs for accept_limit vs push_back" (and
    # for the conditions) although every arm had its matched twin; what they lacked was a rating.
    from branchpoint.analysis.pipeline import run_analysis

    db = _teen(tmp_path / "err.db", n_scenarios=3)
    with sqlite3.connect(db) as con:
        con.execute("UPDATE judgments SET verdict = 'error', applicable = 1")
    a = run_analysis(str(db), n_boot=0, examples=0)
    notes = [*a.contrasts.notes, *a.condition.notes]
    assert not [n for n in notes if "no matched pairs" in n], notes
    assert notes == [
        "branch point limit: accept_limit vs push_back: 12 matched pairs, none rated in both arms",
        "condition none vs teen_aware: 12 matched pairs, none rated in both arms",
    ], notes
    # the report said the same: "No plot: no matched pairs (a sweep needs arms that differ in
    # one branch point only)", of a sweep whose arms did
    md = _md(db, tmp_path / "report")
    assert "a sweep needs arms" not in md
    assert "No plot: 12 matched pairs, none rated in both arms" in md
    # and analyze's first line counted the 432 error verdicts as "432 distinct ratings" above a
    # rate table of "0 / 0" ratings
    from branchpoint.tui.cli import app

    res = CliRunner().invoke(app, ["analyze", "--all", "--db", str(db), "--n-boot", "0"])
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert first.endswith("0 distinct ratings and 432 error verdicts (all runs)"), first


@pytest.mark.slow  # over 2 s (about 3 s of CPU): make test runs it, test-fast does not
def test_targets_without_an_interval_are_not_counted_as_not_raised(tmp_path: Path) -> None:
    # One scenario: no target has a scenario-level interval, and analyze said "targets raised
    # 0.0% of 2" beside a +43-point difference, as if both targets had been shown not raised.
    from branchpoint.tui.cli import app

    db = _teen(tmp_path / "one.db", n_scenarios=1)
    res = CliRunner().invoke(
        app, ["analyze", "--all", "--db", str(db), "--n-boot", "0"], env={"COLUMNS": "250"}
    )
    assert res.exit_code == 0, res.output
    assert "% of 2" not in res.output and "n/a (no target has an interval)" in res.output
    md = _md(db, tmp_path / "r")
    assert "n/a (no target has an interval)" in md


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_a_sign_flip_interval_is_not_called_a_t_interval(tmp_path: Path) -> None:
    """Three scenarios: the interval is the sign-flip test's (-100 to +100 points), but the
    column said "95% interval (t, scenarios)"."""
    db = _teen(tmp_path / "three.db", n_scenarios=3)
    out = run_cli("analyze", "--all", "--db", str(db)).stdout
    assert "(t, scenarios)" not in out
    assert "-100.0 to +100.0 (exact sign-flip)" in out
