"""``branchpoint analyze`` shows the time to the first failure and the chatbots ranked (issue 46),
the rows the report's sections show: recomputed here from the store with the sections' public
functions, they are equal; a store with one target says in one line why no chatbot is ranked."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures.cli_in_process import run_in_process

from branchpoint.analysis.chatbots.ranking import rank_targets, ranking_display
from branchpoint.analysis.pairing.forks import attach_tree, copied_conversations
from branchpoint.analysis.survival.compare import km_summary, matched_time_to_failure
from branchpoint.analysis.survival.first_failure import first_failures, with_endings
from branchpoint.analysis.survival.section import PER_TARGET, time_to_failure_tables
from branchpoint.analysis.survival.summary import TimeToFailure, branch_option_pairs
from branchpoint.analysis.tables.judgments import judgment_table
from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store

N_BOOT = "50"
TARGETS = ("scripted:new", "scripted:old")
CRITERIA = {"no_diagnosis": "medical_boundaries", "self_harm_response": "acute_harm"}


def _store(path: Path, targets: tuple[str, ...]) -> Path:
    design = TeenDesign(n_scenarios=6, targets=targets, conditions=("none",), criteria=CRITERIA,
                        base_fail=0.12)  # fmt: skip
    write_teen_store(path, design, seed=4)
    with sqlite3.connect(path) as con:  # some conversations ended early: censored, said why
        ids = [r[0] for r in con.execute("select id from conversations order by id")]
        for cid, why in zip(ids[:2], ["persona_ended", "target_error"]):
            con.execute("update conversations set stop_reason = ? where id = ?", (why, cid))
    return path


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("two") / "two.db", TARGETS)


def _analyze(db: Path, *extra: str) -> str:
    res = run_in_process("analyze", "--all", "--db", str(db), "--n-boot", N_BOOT, *extra,
                         env={"COLUMNS": "400"})  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout


def _expected(db: Path) -> dict[str, pd.DataFrame]:
    """The sections' figures from the store, as the report's sections computed them."""
    jt = with_endings(attach_tree(judgment_table(str(db)), str(db)), str(db))
    ff = first_failures(jt, criteria=False)
    own = ff[~ff["conversation_id"].isin(copied_conversations(jt))]
    pairs = branch_option_pairs(jt)
    return {
        "per_target": km_summary(own, ["target"]),
        "per_arm": km_summary(ff, ["arm"]),
        "matched": matched_time_to_failure(ff, pairs, ["contrast", "condition"]),
        "ranking": rank_targets(jt),
    }


def _same(rows: list[dict], want: pd.DataFrame, keys: list[str]) -> None:
    got = pd.DataFrame(rows)
    assert len(got) == len(want) > 0
    got = got.sort_values(keys).reset_index(drop=True)
    want = want.sort_values(keys).reset_index(drop=True)
    for col in want.columns:
        a, b = got[col].to_numpy(), want[col].to_numpy()
        if pd.api.types.is_numeric_dtype(want[col]):
            # JSON writes an infinite median as null: the section prints "none (above 50%)"
            b = np.where(np.isinf(b.astype(float)), np.nan, b.astype(float))
            assert np.allclose(a.astype(float), b, equal_nan=True, rtol=1e-9), col
        else:
            assert list(a) == list(b), col


def test_analyze_json_holds_the_rows_of_the_report_s_sections(two: Path) -> None:
    out = json.loads(_analyze(two, "--format", "json"))
    want = _expected(two)
    ttf = out["time_to_failure"]
    assert ttf["absent"] is None and ttf["exploratory"] is False
    _same(ttf["per_target"], want["per_target"], ["target", "judge"])
    _same(ttf["per_arm"], want["per_arm"], ["arm", "judge"])
    _same(ttf["matched"], want["matched"], ["contrast", "condition", "judge"])
    # the censored conversations are counted, with why
    assert sum(r["censored"] for r in ttf["per_target"]) >= 1
    assert ttf["n_conversations"] == int(sum(r["n"] for r in ttf["per_target"]))
    bots = out["chatbots"]
    assert bots["absent"] is None and bots["targets"] == sorted(TARGETS)
    _same(bots["ranking"], want["ranking"], ["target"])


def test_analyze_text_prints_the_sections_tables(two: Path) -> None:
    text = _analyze(two)
    want = _expected(two)
    assert "Time to the first failure: Per target (any criterion)" in text
    shown = dict(time_to_failure_tables(TimeToFailure(per_target=want["per_target"])))
    for row in shown[PER_TARGET].itertuples(index=False):
        # "1 (persona ended the conversation 1)"; "3 (2 to 4)"; "5.9 of 8"
        assert row[4] in text and row[5] in text and row[6] in text
    assert "Time to the first failure: Branch option vs baseline" in text
    for row in want["matched"].itertuples():
        # the interval with its test, and the Holm-adjusted p
        assert f"{row.ci_low:+.2f} to {row.ci_high:+.2f}" in text
        assert row.interval in text and f"{row.p_scenario_holm:.3g}" in text
    n_conv = want["per_target"]["n"].sum()
    assert f"{n_conv} conversations; per judge, {want['per_target']['failures'].sum()}" in text
    assert "Chatbots ranked: Ranking (1: fewest failures)" in text
    for row in ranking_display(want["ranking"]).itertuples(index=False):
        assert f"{row.target}" in text and row[3] in text  # its rank interval
    assert f"branchpoint compare --a {TARGETS[0]} --b {TARGETS[1]}" in text


def test_one_target_says_why_no_chatbot_is_ranked(tmp_path: Path) -> None:
    db = _store(tmp_path / "one.db", ("scripted:only",))
    text = _analyze(db)
    line = (
        "Chatbots ranked: one target (scripted:only) in the selected runs: no chatbots to compare"
    )
    assert line in text and "Ranking (1: fewest failures)" not in text
    assert "Time to the first failure: Per target (any criterion)" in text
    bots = json.loads(_analyze(db, "--format", "json"))["chatbots"]
    assert bots["absent"].startswith("one target (scripted:only)") and bots["ranking"] == []


@pytest.mark.slow
def test_the_report_shows_what_analyze_prints(two: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    res = run_in_process("report", "--all", "--db", str(two), "--out", str(out),
                         "--n-boot", N_BOOT)  # fmt: skip
    assert res.returncode == 0, res.stderr
    md = (out / "report.md").read_text(encoding="utf-8")
    ttf = md.split("## Time to the first failure")[1].split("\n## ")[0]
    ranked = md.split("## Chatbots ranked")[1].split("\n## ")[0]
    got = json.loads(_analyze(two, "--format", "json"))
    for r in got["time_to_failure"]["matched"]:
        assert f"{r['ci_low']:+.2f} to {r['ci_high']:+.2f}" in ttf
    for r in got["chatbots"]["ranking"]:
        assert f"{100 * r['rate']:.1f}%" in ranked


def test_a_registered_plan_labels_both_sections_exploratory(two: Path, tmp_path: Path) -> None:
    """As the report labels every section outside the Confirmatory family."""
    db = tmp_path / "registered.db"
    shutil.copy(two, db)
    with sqlite3.connect(db) as con:  # what `sweep` stores when a manifest has `analysis:`
        plan = {"analysis_plan": {"block": {"primary": []}, "hash": "h"}}
        con.execute("update runs set config = ?", (json.dumps(plan),))
    text = _analyze(db)
    assert "Time to the first failure (exploratory): Per target (any criterion)" in text
    assert "Chatbots ranked (exploratory): Ranking (1: fewest failures)" in text
    out = json.loads(_analyze(db, "--format", "json"))
    assert out["time_to_failure"]["exploratory"] and out["chatbots"]["exploratory"]


def test_at_80_columns_every_block_s_values_start_in_one_column(two: Path) -> None:
    """A table too wide for 80 columns prints one block per row, "label  value": every label of
    the sections fits the label column, so the values line up (the log-rank label, 29
    characters, pushed its value one column right of the others)."""
    res = run_in_process("analyze", "--all", "--db", str(two), "--n-boot", N_BOOT,
                         env={"COLUMNS": "80"})  # fmt: skip
    assert res.returncode == 0, res.stderr
    block = res.stdout.split("Branch option vs baseline", 1)[1].split("\n\n", 1)[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("  ") and "  " in ln.strip()]
    assert any("log-rank" in ln for ln in rows)
    starts = {len(ln) - len(ln.split("  ")[-1].lstrip()) for ln in rows}
    assert len(starts) == 1, rows


def test_a_store_whose_verdicts_are_all_errors_says_so_not_that_they_are_risk_levels(
    tmp_path: Path,
) -> None:
    db = _store(tmp_path / "err.db", TARGETS)
    with sqlite3.connect(db) as con:
        con.execute("update judgments set verdict = 'error'")
    text = " ".join(_analyze(db).split())
    assert "Time to the first failure: Every verdict is an error or not applicable" in text
    assert "risk levels" not in text.split("Time to the first failure:", 1)[1].split(".")[0]


def test_two_scenarios_every_missing_interval_and_p_says_why(tmp_path: Path) -> None:
    """At two scenarios no scenario-level test runs: the per-protocol interval said why, its
    intention-to-treat neighbour said "n/a" and the time to failure's p read "nan"."""
    design = TeenDesign(n_scenarios=2, targets=TARGETS, conditions=("none",), criteria=CRITERIA)
    db = tmp_path / "two_scenarios.db"
    write_teen_store(db, design, seed=2)
    out = _analyze(db)
    assert "nan" not in out.split()
    listed = json.loads(_analyze(db, "--format", "json"))
    assert listed["contrasts"]["contrasts"]  # there are contrasts to show
    rows = [line for line in out.splitlines() if "too few scenarios to test" in line]
    assert rows, out
    assert "n/a (too few scenarios to test)" in out
    assert not [line for line in out.splitlines() if line.rstrip().endswith(" n/a")], out
