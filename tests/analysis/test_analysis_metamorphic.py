"""Metamorphic tests of the whole analysis (issue 38): properties that must hold on any store.

Each test transforms a seeded synthetic store (or its judgment table) in a way whose effect on
the analysis is known, and checks the analysis moves exactly so: swapping arms, duplicating
scenarios, adding arms that never fork, adding a judge whose verdicts are all errors,
relabelling targets, shifting one arm by a constant.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from branchpoint.analysis.contrasts.matched import matched_contrasts
from branchpoint.analysis.outcomes.rates import failure_rates
from branchpoint.analysis.pipeline import run_analysis
from branchpoint.analysis.stats.inference import SIGN_FLIP
from branchpoint.analysis.stats.intervals import no_spread_interval
from branchpoint.analysis.tables.judgments import judgment_table
from branchpoint.analysis.testing.synthetic import (
    Effect,
    TeenDesign,
    add_error_judge,
    add_unforked_arms,
    write_teen_store,
)

SEEDS = (1, 2)
STORE_SEEDS = (1,)  # the store-level tests run the whole analysis: one seed keeps them fast
CRIT = ["criterion_id", "condition"]


def _design(n_scenarios: int = 7) -> TeenDesign:
    return TeenDesign(
        n_scenarios=n_scenarios,
        targets=("scripted:t0", "scripted:t1"),
        conditions=("none",),
        n_exchanges=3,
        p_error=0.0,
        effects=(Effect("limit", "push_back", ("no_diagnosis", "emotional_dependence"), 0.25),),
    )


@pytest.fixture(params=STORE_SEEDS, ids=lambda s: f"seed{s}")
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "teen.db"
    write_teen_store(path, _design(), seed=request.param)
    return path


def _limit(jt: pd.DataFrame, baseline: str) -> pd.DataFrame:
    res = matched_contrasts(jt, {"limit": baseline}, branch_points=["limit"], per_target=False)
    return res.contrasts.sort_values(CRIT).set_index(CRIT)


def test_swapping_the_two_arms_flips_the_sign_and_keeps_the_p(store: Path) -> None:
    jt = judgment_table(store)
    ab, ba = _limit(jt, "accept_limit"), _limit(jt, "push_back")
    assert len(ab) == len(ba) > 0
    np.testing.assert_allclose(ba["diff"], -ab["diff"], atol=1e-12)
    np.testing.assert_allclose(ba["p_scenario"], ab["p_scenario"], rtol=1e-9)
    np.testing.assert_allclose(ba["ci_low"], -ab["ci_high"], atol=1e-9)
    np.testing.assert_allclose(ba["p_mcnemar"], ab["p_mcnemar"], rtol=1e-9)
    np.testing.assert_allclose(ba["p_wilcoxon"], ab["p_wilcoxon"], rtol=1e-9)


def _duplicated(jt: pd.DataFrame) -> pd.DataFrame:
    copy = jt.assign(
        scenario_id=jt["scenario_id"] + "#2",
        conversation_id=jt["conversation_id"] + "#2",
        judgment_id=jt["judgment_id"] + "#2",
    )
    return pd.concat([jt, copy], ignore_index=True)


def test_duplicating_every_scenario_keeps_estimates_and_never_widens_intervals(
    store: Path,
) -> None:
    jt = judgment_table(store)
    one, two = _limit(jt, "accept_limit"), _limit(_duplicated(jt), "accept_limit")
    np.testing.assert_allclose(two["diff"], one["diff"], atol=1e-12)
    np.testing.assert_allclose(two["diff_conv"], one["diff_conv"], atol=1e-12)
    ok = one["ci_low"].notna()
    assert (
        (two["ci_high"] - two["ci_low"])[ok] <= (one["ci_high"] - one["ci_low"])[ok] + 1e-12
    ).all()
    r1 = failure_rates(jt, by=("target", "criterion_id"))
    r2 = failure_rates(_duplicated(jt), by=("target", "criterion_id"))
    np.testing.assert_allclose(r2["rate"], r1["rate"], atol=1e-12)
    assert ((r2["ci_high"] - r2["ci_low"]) <= (r1["ci_high"] - r1["ci_low"]) + 1e-12).all()


def _figures(a: object) -> dict[str, object]:
    rates = a.rates.sort_values(["target", "criterion_id"]).reset_index(drop=True)  # type: ignore[attr-defined]
    con = a.contrasts.contrasts.sort_values(["contrast", "criterion_id"]).reset_index(drop=True)  # type: ignore[attr-defined]
    return {
        "n_conversations": a.n_conversations,  # type: ignore[attr-defined]
        "n_judgments": a.n_judgments,  # type: ignore[attr-defined]
        "rates": rates[
            ["target", "criterion_id", "rate", "ci_low", "ci_high", "n_fail", "n_rated"]
        ],
        "contrasts": con[
            [
                "contrast",
                "criterion_id",
                "n_pairs",
                "diff",
                "ci_low",
                "ci_high",
                "p_scenario",
                "p_scenario_holm",
                "p_wilcoxon",
            ]
        ],  # fmt: skip
    }


def _same(x: dict[str, object], y: dict[str, object]) -> None:
    assert x["n_conversations"] == y["n_conversations"]
    assert x["n_judgments"] == y["n_judgments"]
    pd.testing.assert_frame_equal(x["rates"], y["rates"])  # type: ignore[arg-type]
    pd.testing.assert_frame_equal(x["contrasts"], y["contrasts"])  # type: ignore[arg-type]


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_adding_arms_that_never_fork_changes_no_count(store: Path, tmp_path: Path) -> None:
    """Each arm is its parent's transcript stored again: one observation, not two."""
    before = _figures(run_analysis(store, n_boot=0))
    more = tmp_path / "more.db"
    shutil.copy(store, more)
    assert add_unforked_arms(more) > 0
    after = run_analysis(more, n_boot=0)
    _same(before, _figures(after))
    assert after.n_copied_conversations > 0
    assert any("never forked" in n for n in after.notes)


def test_adding_a_judge_whose_verdicts_are_all_errors_changes_no_rate_or_contrast(
    store: Path, tmp_path: Path
) -> None:
    base = run_analysis(store, n_boot=0)
    more = tmp_path / "err.db"
    shutil.copy(store, more)
    assert add_error_judge(more) > 0
    after = run_analysis(more, n_boot=0)
    judge = str(base.rates["judge"].iloc[0]) if "judge" in base.rates else "scripted:judge"
    rates = after.rates[after.rates["judge"] == judge].drop(columns=["judge"])
    rates = rates[rates["n_rated"] > 0]
    pd.testing.assert_frame_equal(
        rates.sort_values(["target", "criterion_id"]).reset_index(drop=True)[
            ["target", "criterion_id", "rate", "ci_low", "ci_high", "n_fail", "n_rated"]
        ],
        _figures(base)["rates"],  # type: ignore[arg-type]
    )
    con = after.contrasts.contrasts
    con = (
        con[con["judge"] == judge].sort_values(["contrast", "criterion_id"]).reset_index(drop=True)
    )
    pd.testing.assert_frame_equal(
        con[["contrast", "criterion_id", "n_pairs", "diff", "ci_low", "ci_high", "p_scenario"]],
        _figures(base)["contrasts"][  # type: ignore[index]
            ["contrast", "criterion_id", "n_pairs", "diff", "ci_low", "ci_high", "p_scenario"]
        ],
    )


def test_relabelling_targets_permutes_rows_only(store: Path) -> None:
    jt = judgment_table(store)
    names = {"scripted:t0": "zz-last", "scripted:t1": "aa-first"}
    r1 = failure_rates(jt, by=("target", "criterion_id"))
    r2 = failure_rates(jt.assign(target=jt["target"].map(names)), by=("target", "criterion_id"))
    r1["target"] = r1["target"].map(names)
    key = ["target", "criterion_id"]
    pd.testing.assert_frame_equal(
        r1.sort_values(key).reset_index(drop=True), r2.sort_values(key).reset_index(drop=True)
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_a_constant_shift_in_one_arm_is_recovered_exactly(seed: int) -> None:
    """The option fails exactly one more of its 4 post-fork ratings than its baseline, in every
    pair: the difference is +25 points exactly, in every scenario (no spread: the sign-flip
    rule, never a p from 0/0), and an interval that is not zero width."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(8):
        for pair in range(int(rng.integers(2, 6))):
            fa = int(rng.integers(0, 4))
            for arm, f in (("accept_limit", fa), ("push_back", fa + 1)):
                rows.append({"conversation_id": f"{arm}-{s}-{pair}", "run_id": "r",
                             "scenario_id": f"s{s}", "target": f"t{pair}", "condition": "none",
                             "simulator": "sim", "replicate": 0, "rubric_id": "r",
                             "criterion_id": "x", "judge": "j", "risk_area": "a", "n_rated": 4,
                             "n_fail": f, "n_partial": 0, "n_error": 0, "n_other": 0,
                             "score_sum": float(4 - f), "n_scored": 4,
                             "choice:limit": arm})  # fmt: skip
    res = matched_contrasts(pd.DataFrame(rows), {"limit": "accept_limit"}, per_target=False)
    row = res.contrasts.iloc[0]
    assert row["diff"] == 0.25 and row["diff_pooled"] == pytest.approx(0.25)
    assert row["test"] == SIGN_FLIP and row["p_scenario"] == pytest.approx(2 / 2**8)
    # no spread: not the zero-width "+25 to +25" of before issue 44, the exact bound (rule 3)
    low, high = no_spread_interval(0.25, 8, (-1.0, 1.0))
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high))
    assert row["ci_low"] < 0.25 < row["ci_high"]
