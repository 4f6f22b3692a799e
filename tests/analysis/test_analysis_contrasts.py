"""Matched contrasts on synthetic stores with known effects; every p-value checked against scipy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from branchpoint.analysis.contrasts.matched import (
    condition_contrast,
    matched_contrasts,
    pair_arms,
    resolve_baselines,
    simulator_sensitivity,
)
from branchpoint.analysis.stats.inference import holm
from branchpoint.analysis.tables.judgments import conversation_criterion_table
from branchpoint.analysis.testing.synthetic import Effect, TeenDesign, write_teen_store

# Pushing back on a limit raises diagnosis / medication / substance failures by 12 points for 90% of
# targets; declining outside help raises emotional-dependence failures by 18 points for all.
MEDICAL = ("no_diagnosis", "no_medication_advice", "substance_boundaries")
DESIGN = TeenDesign(
    n_scenarios=40,
    targets=tuple(f"scripted:t{i}" for i in range(10)),
    n_exchanges=8,
    effects=(
        Effect("limit", "push_back", MEDICAL, 0.12, target_share=0.9),
        Effect("help", "decline", ("emotional_dependence",), 0.18),
    ),
)

# The same design at a size that only the tests of what the pairs and p-values are need: the
# recovery of the planted effects needs DESIGN's 40 scenarios x 10 targets (153,600 judgments,
# about 11 s of CPU to write), and those tests are slow.
# Over 50 pairs a criterion and condition (20 scenarios x 4 targets), so that scipy's Wilcoxon
# reference is its normal approximation: at fewer, with ties, it ran a 20 s permutation test.
SMALL = TeenDesign(
    n_scenarios=20,
    targets=tuple(f"scripted:t{i}" for i in range(4)),
    n_exchanges=4,
    effects=DESIGN.effects,
)


def _table(tmp_path_factory: pytest.TempPathFactory, design: TeenDesign) -> pd.DataFrame:
    path = tmp_path_factory.mktemp("contrasts") / "teen.db"
    write_teen_store(path, design, seed=5)
    return conversation_criterion_table(path, "synthetic-teen")


@pytest.fixture(scope="module")
def cc(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    return _table(tmp_path_factory, DESIGN)


@pytest.fixture(scope="module")
def result(cc: pd.DataFrame):  # type: ignore[no-untyped-def]
    return matched_contrasts(cc, n_boot=600, seed=1)


@pytest.fixture(scope="module")
def small_cc(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    return _table(tmp_path_factory, SMALL)


@pytest.fixture(scope="module")
def small_result(small_cc: pd.DataFrame):  # type: ignore[no-untyped-def]
    return matched_contrasts(small_cc, n_boot=600, seed=1)


CONDITIONS = ("none", "teen_aware")


def _row(tab: pd.DataFrame, contrast: str, criterion: str, condition: str) -> pd.Series:
    sel = tab[
        (tab["contrast"] == contrast)
        & (tab["criterion_id"] == criterion)
        & (tab["condition"] == condition)
    ]
    assert len(sel) == 1  # conditions are never pooled
    return sel.iloc[0]


def test_baselines_are_inferred_from_the_data_and_can_be_given(small_cc: pd.DataFrame) -> None:
    cc = small_cc
    inferred = resolve_baselines(cc).set_index("branch_point")
    assert inferred.loc["limit", "baseline"] == "accept_limit"
    assert inferred.loc["help", "baseline"] == "accept"
    assert inferred.loc["disclosure", "source"].startswith("inferred")
    given = resolve_baselines(cc, {"limit": "push_back"}).set_index("branch_point")
    assert (
        given.loc["limit", "baseline"] == "push_back" and given.loc["limit", "source"] == "argument"
    )


def test_baseline_comes_from_the_scenario_file(small_cc: pd.DataFrame, tmp_path: Path) -> None:
    cc = small_cc
    yml = tmp_path / "s.yaml"
    yml.write_text(
        "id: s\ntitle: t\nrisk_area: acute_harm\ncontent_warning: w\nopening: hi\n"
        "persona: {name: A, age: 15, background: b}\n"
        "branch_points:\n  - id: limit\n    kind: limit_pushback\n    trigger: {on_event: limit}\n"
        "    baseline: push_back\n    options: {push_back: a, accept_limit: b}\n"
    )
    found = resolve_baselines(cc.assign(scenario_path=str(yml))).set_index("branch_point")
    assert (found.loc["limit", "baseline"], found.loc["limit", "source"]) == (
        "push_back",
        "scenario file",
    )


@pytest.mark.slow  # DESIGN's store: 11 s of CPU
def test_pushback_effect_is_recovered_with_target_share(result) -> None:  # type: ignore[no-untyped-def]
    for crit, cond in ((c, d) for c in MEDICAL for d in CONDITIONS):
        row = _row(result.contrasts, "limit: accept_limit → push_back", crit, cond)
        # Pooled over targets the true difference is 0.9 * 12 = 10.8 points.
        assert row["diff"] == pytest.approx(0.108, abs=0.03)
        assert row["ci_low"] < 0.108 < row["ci_high"]
        assert row["p_scenario_holm"] < 0.01 and row["n_scenarios"] == 40
        assert row["interval"] == "t over 40 scenario means"
        share = result.target_share
        s = share[
            (share["contrast"] == row["contrast"])
            & (share["criterion_id"] == crit)
            & (share["condition"] == cond)
        ].iloc[0]
        assert s["n_targets"] == 10
        # 40 pairs per target and condition: a 12-point effect is found for most affected targets.
        assert 0.5 <= s["share_raised"] <= 0.9
        assert s["share_lowered"] <= 0.1  # only the unaffected target can dip by chance
        # The unaffected target (t9) shows no effect; affected targets show about 12 points.
        pt = result.per_target
        pt = pt[
            (pt["contrast"] == row["contrast"])
            & (pt["criterion_id"] == crit)
            & (pt["condition"] == cond)
        ].set_index("target")
        assert pt.drop(index="scripted:t9")["diff"].mean() == pytest.approx(0.12, abs=0.03)
        # (one target in one condition, about 40 pairs: its standard error is about 5 points;
        # twelve such checks, so the bound is 3 standard errors)
        assert abs(pt.loc["scripted:t9", "diff"]) < 0.15
        assert pt.loc["scripted:t9", "diff"] < pt.drop(index="scripted:t9")["diff"].mean() - 0.04


@pytest.mark.slow  # DESIGN's store
def test_declining_help_raises_emotional_dependence(result) -> None:  # type: ignore[no-untyped-def]
    for cond in CONDITIONS:
        row = _row(result.contrasts, "help: accept → decline", "emotional_dependence", cond)
        assert row["diff"] == pytest.approx(0.18, abs=0.03)
        assert row["p_scenario_holm"] < 1e-3
        assert row["p_mcnemar_holm"] < 1e-3 and row["p_wilcoxon_holm"] < 1e-3
        # Signed like the difference: > 0 when the option fails more (its scores fall).
        assert row["rank_biserial"] > 0
    # No effect where none was planted: the open-disclosure contrast stays near zero.
    null = result.contrasts[result.contrasts["contrast"] == "disclosure: guarded → open"]
    assert (null["diff"].abs() < 0.04).all()
    assert (null["p_scenario_holm"] > 0.01).all() and (null["p_mcnemar_holm"] > 0.01).all()


def test_every_p_value_equals_scipy_on_the_same_pairs(small_cc: pd.DataFrame, small_result) -> None:  # type: ignore[no-untyped-def]
    cc, result = small_cc, small_result
    match = [
        "run_id",
        "scenario_id",
        "target",
        "condition",
        "simulator",
        "replicate",
        "choice:disclosure",
        "choice:help",
    ]
    pairs = pair_arms(cc, "choice:limit", "accept_limit", "push_back", match)
    checked = 0
    for (crit, cond), p in pairs.groupby(["criterion_id", "condition"], observed=True):
        row = _row(result.contrasts, "limit: accept_limit → push_back", crit, cond)
        fa, fb = p["n_fail_a"].to_numpy() > 0, p["n_fail_b"].to_numpy() > 0
        b, c = int((~fa & fb).sum()), int((fa & ~fb).sum())
        assert (row["discordant_b"], row["discordant_a"], row["n_pairs"]) == (b, c, len(p))
        assert row["p_mcnemar"] == stats.binomtest(b, b + c, 0.5).pvalue
        sa = p["score_sum_a"] / p["n_scored_a"]
        sb = p["score_sum_b"] / p["n_scored_b"]
        # Score differences rounded before ranking (exact ties), as the module documents.
        ref = stats.wilcoxon(np.round(sa - sb, 9))
        assert row["p_wilcoxon"] == ref.pvalue and row["wilcoxon_stat"] == ref.statistic
        # Primary: pair differences in failure proportion, averaged per scenario, t over scenarios.
        d = p["n_fail_b"] / p["n_rated_b"] - p["n_fail_a"] / p["n_rated_a"]
        per_scenario = d.groupby(p["scenario_id"].astype(str)).mean()
        t = stats.ttest_1samp(per_scenario, 0.0)
        assert row["diff"] == pytest.approx(per_scenario.mean())
        assert row["p_scenario"] == pytest.approx(t.pvalue, rel=1e-9)
        lo, hi = t.confidence_interval(0.95)
        assert (row["ci_low"], row["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
        # Pooled failure-rate difference from the same pairs (descriptive).
        assert row["diff_pooled"] == pytest.approx(
            p["n_fail_b"].sum() / p["n_rated_b"].sum() - p["n_fail_a"].sum() / p["n_rated_a"].sum()
        )
        checked += 1
    assert checked == len(SMALL.criteria) * len(CONDITIONS)
    # Holm across the whole family (3 branch points x 6 criteria x 2 conditions).
    assert len(result.contrasts) == 36
    for col in ("p_scenario", "p_mcnemar"):
        assert np.allclose(result.contrasts[f"{col}_holm"], holm(result.contrasts[col].to_numpy()))


def test_pairs_differ_only_at_the_branch_point(small_cc: pd.DataFrame) -> None:
    cc = small_cc
    match = [
        "run_id",
        "scenario_id",
        "target",
        "condition",
        "simulator",
        "replicate",
        "choice:disclosure",
        "choice:help",
    ]
    pairs = pair_arms(cc, "choice:limit", "accept_limit", "push_back", match)
    conv = cc.drop_duplicates("conversation_id").set_index("conversation_id")
    a = conv.loc[pairs["conversation_id_a"]].reset_index()
    b = conv.loc[pairs["conversation_id_b"]].reset_index()
    for col in (
        "scenario_id",
        "target",
        "condition",
        "replicate",
        "choice:disclosure",
        "choice:help",
    ):
        assert (a[col].to_numpy() == b[col].to_numpy()).all(), col
    assert (a["choice:limit"] == "accept_limit").all() and (b["choice:limit"] == "push_back").all()
    # In a one-at-a-time design the help-decline arm has no limit twin: it must not be paired.
    assert not (a["choice:help"] == "decline").any()


def test_holm_matches_a_hand_computation() -> None:
    p = [0.01, 0.04, 0.03, 0.005, np.nan]
    # sorted: 0.005 (x4) = 0.02; 0.01 (x3) = 0.03; 0.03 (x2) = 0.06; 0.04 (x1) = 0.04 -> running max 0.06
    assert np.allclose(holm(p)[:4], [0.03, 0.06, 0.06, 0.02])
    assert np.isnan(holm(p)[4])
    assert holm([0.5, 0.6])[1] == 1.0  # capped at 1


@pytest.mark.slow  # DESIGN's store
def test_condition_contrast_paired_by_variant(cc: pd.DataFrame) -> None:
    res = condition_contrast(cc, "none", n_boot=300)
    assert set(res.contrasts["contrast"]) == {"condition: none → teen_aware"}
    # The teen-aware prompt lowers every criterion by 15 points.
    assert (res.contrasts["diff"].between(-0.19, -0.11)).all()
    allc = res.per_target[res.per_target["criterion_id"] == "(all criteria)"]
    assert len(allc) == 10 and (allc["ci_high"] < 0).all()
    # Pairs share variant and target: as many pairs as conversations in one condition.
    n_none = cc[
        (cc["condition"] == "none") & (cc["criterion_id"] == "no_diagnosis") & (cc["n_rated"] > 0)
    ]
    row = res.contrasts[res.contrasts["criterion_id"] == "no_diagnosis"].iloc[0]
    assert row["n_pairs"] <= len(n_none) and row["n_pairs"] > 0.9 * len(n_none)


def test_friedman_for_three_options_equals_scipy(tmp_path: Path) -> None:
    design = TeenDesign(
        n_scenarios=20, targets=("scripted:a", "scripted:b"), conditions=("none",), n_exchanges=5,
        branch_points={"limit": ["accept_limit", "push_back", "argue"]},
        effects=(Effect("limit", "argue", ("no_diagnosis",), 0.2),),
    )  # fmt: skip
    write_teen_store(tmp_path / "f.db", design, seed=3)
    cc3 = conversation_criterion_table(tmp_path / "f.db")
    res = matched_contrasts(cc3, n_boot=200)
    fr = res.friedman.set_index("criterion_id")
    assert set(fr["options"]) == {"accept_limit, argue, push_back"}
    sub = cc3[(cc3["criterion_id"] == "no_diagnosis") & (cc3["n_scored"] > 0)].assign(
        score=lambda d: d["score_sum"] / d["n_scored"]
    )
    # Scenarios as blocks: each option's mean conversation score within the scenario.
    wide = sub.pivot_table(index="scenario_id", columns="choice:limit", values="score").dropna()
    ref = stats.friedmanchisquare(wide["accept_limit"], wide["argue"], wide["push_back"])
    assert fr.loc["no_diagnosis", "n_blocks"] == len(wide) == 20
    assert fr.loc["no_diagnosis", "pvalue"] == pytest.approx(ref.pvalue, rel=1e-12)
    assert fr.loc["no_diagnosis", "p_holm"] < 0.05
    assert {"limit: accept_limit → argue", "limit: accept_limit → push_back"} <= set(
        res.contrasts["contrast"]
    )


def test_simulator_sensitivity_reports_per_target_difference(tmp_path: Path) -> None:
    design = TeenDesign(
        n_scenarios=20, targets=("scripted:a", "scripted:b"), conditions=("none",), n_exchanges=5,
        simulators=("scripted:sim1", "scripted:sim2"), simulator_effect={"scripted:sim2": 0.1},
    )  # fmt: skip
    write_teen_store(tmp_path / "s.db", design, seed=8)
    cc2 = conversation_criterion_table(tmp_path / "s.db")
    res = simulator_sensitivity(cc2, n_boot=300)
    assert res is not None
    allc = res.per_target[res.per_target["criterion_id"] == "(all criteria)"].set_index("target")
    assert list(allc.index) == ["scripted:a", "scripted:b"]
    assert allc["diff"].to_numpy() == pytest.approx([0.1, 0.1], abs=0.03)
    assert (allc["ci_low"] > 0).all()
    assert simulator_sensitivity(cc2[cc2["simulator"] == "scripted:sim1"]) is None
