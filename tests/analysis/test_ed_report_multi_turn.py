"""The report on a multi-turn ED store (risk-level outcomes, forked arms, two conditions): matched
branch and condition contrasts on per-conversation safety with scenario-level tests, and no false
"no matched pairs" / "Only one condition" sentences; ED shares over complete responses."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from branchpoint.analysis.testing.synthetic import (
    ED_DIMENSIONS,
    _init_store,
    write_conversations,
    write_judgments,
    write_run,
    write_turns,
)

RUN = "ed-mt"
ASSISTANT = (1, 3, 5, 7)
FORK = 3  # first turn the decline arm does not share with its parent


def _n_high(scenario: int, condition: str, arm: str, turn: int) -> int:
    """High-risk dimensions of one reply: declining help makes the later replies riskier (by a
    scenario-dependent amount), the aware condition makes the baseline arm safer."""
    if arm == "decline" and turn >= FORK:
        return 2 + scenario % 2
    if condition == "none" and turn == 5:
        return 1 + scenario % 3
    return 0


def write_ed_multi_turn(
    path: Path, conditions: tuple[str, ...] = ("none", "aware"), n: int = 5
) -> None:
    conv_rows, turn_rows, judg_rows, tree = [], [], [], []
    for s in range(n):
        for cond in conditions:
            root = f"s{s}-{cond}-accept"
            for arm, cid in (("accept", root), ("decline", f"s{s}-{cond}-decline")):
                conv_rows.append((cid, f"s{s}", f"s{s}:{arm}", {"help": arm}, "scripted:m1", cond, "scripted:sim", 0))  # fmt: skip
                if arm == "decline":
                    tree.append((root, FORK, cid))
                for i in range(8):
                    role = "assistant" if i % 2 else "user"
                    turn_rows.append((cid, i, i // 2 + 1, role, f"{role} {i}", None))
                for t in ASSISTANT:
                    k = _n_high(s, cond, arm, t)
                    for d, dim in enumerate(ED_DIMENSIONS):
                        level = "high" if d < k else "low"
                        judg_rows.append((cid, t, dim, "ed_harm", True, level, {"high": 0.0, "low": 1.0}[level]))  # fmt: skip
    conv = pd.DataFrame(conv_rows, columns=["conversation_id", "scenario_id", "variant_id", "choices", "target", "condition", "simulator", "replicate"])  # fmt: skip
    turns = pd.DataFrame(turn_rows, columns=["conversation_id", "index", "exchange", "role", "content", "reasoning"])  # fmt: skip
    judg = pd.DataFrame(judg_rows, columns=["conversation_id", "turn_index", "criterion_id", "risk_area", "applicable", "verdict", "score"])  # fmt: skip
    conn = _init_store(path)
    with conn:
        write_run(conn, RUN, "multi-turn ED store")
        write_conversations(conn, conv, RUN, 8)
        write_turns(conn, turns)
        write_judgments(conn, judg, RUN, "ed", "scripted:ed-judge")
        conn.executemany("UPDATE conversations SET parent_id = ?, fork_turn = ? WHERE id = ?", tree)
    conn.close()
    assert json  # choices are written as JSON by write_conversations


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, str]:
    from branchpoint.analysis.report.write import run_analysis, write_report

    out = tmp_path_factory.mktemp("edmt")
    write_ed_multi_turn(out / "mt.db")
    a = run_analysis(out / "mt.db", n_boot=20, examples=0)
    md = write_report(out / "mt.db", out / "r", analysis=a).markdown.read_text()
    return a, md


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_matched_branch_contrast_on_ed_safety(analysed: tuple[object, str]) -> None:
    a, md = analysed
    br = a.ed.branches  # type: ignore[attr-defined]
    assert set(br["contrast"]) == {"help: accept → decline"}
    for cond, g in br.groupby("condition"):
        row = g.iloc[0]
        assert row["n_pairs"] == 5 and row["n_scenarios"] == 5
        # Post-fork turns 3, 5, 7: per scenario the difference in mean safety (points, 7 dims).
        expect = []
        for s in range(5):
            acc = np.mean([100 * (1 - _n_high(s, cond, "accept", t) / 7) for t in (3, 5, 7)])
            dec = np.mean([100 * (1 - _n_high(s, cond, "decline", t) / 7) for t in (3, 5, 7)])
            expect.append(dec - acc)
        assert row["diff"] == pytest.approx(np.mean(expect))
        # Five scenarios all in one direction: the exact sign-flip test's smallest p, 2 / 2**5
        # (branchpoint.analysis.stats.inference' rule for few scenarios), not a t-test's.
        # At 95% that excludes nothing: the interval is the whole -100..100 range.
        assert row["p_scenario"] == pytest.approx(2 / 2**5)
        assert (row["ci_low"], row["ci_high"]) == (-100, 100)
        assert row["interval"] == "exact sign-flip over 5 scenario means"
    assert "no matched pairs" not in md
    assert "Matched branch contrasts on ED safety" in md


def test_condition_contrast_on_ed_safety(analysed: tuple[object, str]) -> None:
    a, md = analysed
    c = a.ed.conditions  # type: ignore[attr-defined]
    assert set(c["contrast"]) == {"condition: none → aware"}
    assert (c["n_pairs"] == 10).all() and (c["diff"] > 0).all()  # aware is safer
    assert "Only one system-prompt condition" not in md
    assert "condition contrast on ED safety scores is in the eating-disorder section" in md


def test_one_condition_ed_store_says_so(tmp_path: Path) -> None:
    from branchpoint.analysis.report.write import write_report

    write_ed_multi_turn(tmp_path / "one.db", conditions=("none",))
    md = write_report(tmp_path / "one.db", tmp_path / "r", n_boot=20).markdown.read_text()
    assert "Only one system-prompt condition in the data (none)" in md
    assert "Matched branch contrasts on ED safety" in md and "no bio → bio" not in md


def test_ed_shares_leave_incomplete_responses_out(tmp_path: Path) -> None:
    from branchpoint.analysis.report.write import run_analysis

    db = tmp_path / "inc.db"
    write_ed_multi_turn(db, conditions=("none",))
    con = sqlite3.connect(db)
    with con:
        # Replies without any high-risk dimension lose one dimension: incomplete, no score.
        con.execute(
            "DELETE FROM judgments WHERE criterion_id = 'diet_guidance' AND conversation_id || ':' "
            "|| turn_index NOT IN (SELECT conversation_id || ':' || turn_index FROM judgments "
            "WHERE verdict = 'high') AND turn_index = 1"
        )
    con.close()
    a = run_analysis(db, n_boot=0, examples=0)
    r = a.ed.responses
    assert (~r["complete"]).sum() > 0
    row = a.ed.by_model.iloc[0]
    done = r[r["complete"]]
    assert row["high_risk_share"] == pytest.approx(done["high_risk"].mean())
    assert row["high_risk_share"] != pytest.approx(r["high_risk"].mean())
    assert row["refusal_rate"] == pytest.approx(done["refused"].mean())
