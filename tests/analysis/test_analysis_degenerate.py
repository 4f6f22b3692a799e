"""Degenerate designs handled by rule (issue 38): one scenario-level test rule everywhere, copied
turns counted once, Wilcoxon bounded, intervals that cover."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from branchpoint.analysis.contrasts.matched import matched_contrasts
from branchpoint.analysis.outcomes.rates import failure_rates
from branchpoint.analysis.pairing.forks import distinct_ratings, turn_roots
from branchpoint.analysis.stats.inference import (
    SIGN_FLIP,
    T_TEST,
    TOO_FEW,
    scenario_level_test,
    sign_flip_interval,
    sign_flip_pvalue,
    wilcoxon_paired,
)
from branchpoint.analysis.stats.intervals import NO_SPREAD, no_spread_interval

Pair = tuple[int, int, int, int]  # fails_a, rated_a, fails_b, rated_b


def _pairs_frame(per_scenario: dict[str, list[Pair] | list[Pair | list[Pair]]]) -> pd.DataFrame:
    """Conversation x criterion rows: per criterion, per scenario one pair or a list of pairs
    (one per target)."""
    rows = []
    for crit, scenarios in per_scenario.items():
        for s, pairs in enumerate(scenarios):
            for i, (fa, ra, fb, rb) in enumerate(pairs if isinstance(pairs, list) else [pairs]):
                for arm, f, r in (("accept_limit", fa, ra), ("push_back", fb, rb)):
                    rows.append({"conversation_id": f"{crit}-{arm}-{s}-{i}", "run_id": "r",
                             "scenario_id": f"s{s}", "target": f"t{i}", "condition": "none",
                             "simulator": "sim", "replicate": 0, "rubric_id": "r",
                             "criterion_id": crit, "judge": "j", "risk_area": "a", "n_rated": r,
                             "n_fail": f, "n_partial": 0, "n_error": 0, "n_other": 0,
                             "score_sum": float(r - f), "n_scored": r,
                             "choice:limit": arm})  # fmt: skip
    return pd.DataFrame(rows)


def _contrasts(frame: pd.DataFrame) -> pd.DataFrame:
    res = matched_contrasts(frame, {"limit": "accept_limit"}, per_target=True)
    return res.contrasts.set_index("criterion_id")


# Scenario means 1/3 and (1/9 + 5/9) / 2: equal, but floating point leaves 4e-17 between them,
# from which a t-test made the "p 7.5e-17".
IDENTICAL = {"x": [(0, 3, 1, 3), [(0, 9, 1, 9), (0, 9, 5, 9)]]}


def test_two_scenarios_with_identical_means_cannot_be_tested() -> None:
    """Was "+33.3 to +33.3, p 7.5e-17 (Holm 3.7e-15)" and a target "raised"."""
    row = _contrasts(_pairs_frame(IDENTICAL)).loc["x"]
    assert row["diff"] == pytest.approx(1 / 3)
    assert np.isnan(row["p_scenario"]) and np.isnan(row["p_scenario_holm"])
    assert np.isnan(row["ci_low"]) and np.isnan(row["ci_high"])
    assert row["interval"] == f"none: {TOO_FEW} (2 of 3 needed)"
    res = matched_contrasts(_pairs_frame(IDENTICAL), {"limit": "accept_limit"})
    assert res.target_share.iloc[0]["share_raised"] == 0.0


def test_plus_100_in_every_one_of_four_scenarios_gets_an_exact_p_and_ranks_first() -> None:
    """Was: no p, no interval, below the +50 rows, out of Holm."""
    frame = _pairs_frame({
        "all": [(0, 3, 3, 3)] * 4,
        "half": [(0, 4, 2, 4), (0, 4, 2, 4), (0, 4, 3, 4), (0, 4, 1, 4)],
        "null": [(1, 4, 2, 4), (2, 4, 1, 4), (1, 4, 1, 4), (0, 4, 1, 4)],
    })  # fmt: skip
    tab = _contrasts(frame)
    top = tab.loc["all"]
    assert top["diff"] == 1.0
    assert top["p_scenario"] == 0.125  # 2 of the 16 sign patterns are as extreme
    # no spread: rule 3's worst case within the bounds (the inversion, -1 to 1, is valid but
    # says less); at 4 scenarios it still holds 0
    assert (top["ci_low"], top["ci_high"]) == pytest.approx(no_spread_interval(1.0, 4, (-1, 1)))
    assert top["ci_low"] < 0 < top["ci_high"]
    assert top["test"] == SIGN_FLIP and top["interval"].startswith(NO_SPREAD)
    assert np.isfinite(tab["p_scenario_holm"]).all()  # every row is in Holm's family
    ranked = tab.sort_values(["p_scenario_holm", "diff"], ascending=[True, False])
    assert ranked.index[0] == "all"


def test_the_rule_never_gives_a_p_from_zero_over_zero() -> None:
    third = np.full(5, 1 / 3) + np.array([0, 1e-17, -1e-17, 0, 0])
    r = scenario_level_test(third, np.arange(5), np.zeros(5, int), 1, bounds=(-1, 1))
    assert r.method == [SIGN_FLIP] and r.pvalue[0] == pytest.approx(2 / 32)
    zero = scenario_level_test(np.zeros(8), np.arange(8), np.zeros(8, int), 1)
    assert zero.pvalue[0] == 1.0
    spread = scenario_level_test(np.linspace(-0.2, 0.5, 12), np.arange(12), np.zeros(12, int), 1)
    assert spread.method == [T_TEST]
    ref = stats.ttest_1samp(np.linspace(-0.2, 0.5, 12), 0.0)
    assert spread.pvalue[0] == pytest.approx(ref.pvalue)


@pytest.mark.parametrize("s", [3, 4, 5, 6])
def test_the_rule_keeps_its_size_under_a_two_point_null(s: int) -> None:
    """Each scenario's effect +0.5 or -0.5 with equal chance (a true null): enumerate all 2^S.

    (Above 6 scenarios the t-test's size under this extreme discrete null oscillates between 2%
    and 9% with S, a limitation stated in docs/methods/contrasts.md; at 6 it is 3.1%.)"""
    patterns = np.array(list(itertools.product([-0.5, 0.5], repeat=s)))
    rejected = 0
    t_rejected = 0
    for x in patterns:
        r = scenario_level_test(x, np.arange(s), np.zeros(s, int), 1, bounds=(-1, 1))
        rejected += bool(r.pvalue[0] < 0.05)
        with np.errstate(all="ignore"):
            p = stats.ttest_1samp(x, 0.0).pvalue
        t_rejected += bool(np.nan_to_num(p, nan=0.0) < 0.05 or np.std(x) == 0)
    assert rejected / len(patterns) <= 0.05
    if s <= 5:  # the plain t-test does not keep its size there (all signs agree: t infinite)
        assert t_rejected / len(patterns) > 0.05


def test_sign_flip_matches_enumeration_and_its_interval_matches_its_test() -> None:
    x = np.array([0.1, 0.3, -0.05, 0.2, 0.15, 0.4, 0.22, 0.05])
    signs = np.array(list(itertools.product([-1, 1], repeat=len(x))))
    expected = np.mean(np.abs(signs @ x) >= abs(x.sum()) - 1e-12)
    assert sign_flip_pvalue(x) == pytest.approx(expected)
    lo, hi = sign_flip_interval(x)
    assert lo < x.mean() < hi
    assert sign_flip_pvalue(x - (lo - 1e-6)) <= 0.05 < sign_flip_pvalue(x - (lo + 1e-6))


# -------------------------------------------------------------------------- unit of analysis


def _seven_arm_judgments() -> pd.DataFrame:
    """One scenario, 7 arms: the root, one arm forked at turn 0 and 5 arms that never forked;
    3 judged replies each (21 rows), 6 distinct judged turns, one of them failing."""
    rows = []
    arms = [("root", None, None), ("forked", "root", 0.0)] + [
        (f"copy{i}", "root", None) for i in range(5)
    ]
    for cid, parent, fork in arms:
        for t in (1, 3, 5):
            fail = cid == "forked" and t == 3
            rows.append({"conversation_id": cid, "parent_id": parent, "fork_turn": fork,
                         "turn_index": t, "scenario_id": "s0", "target": "t", "condition": "none",
                         "simulator": "sim", "replicate": 0, "run_id": "r", "rubric_id": "r",
                         "rubric_hash": "h", "criterion_id": "x", "risk_area": "a", "judge": "j",
                         "prompt_version": "v", "applicable": True,
                         "verdict": "fail" if fail else "pass"})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_turn_carried_by_seven_arms_is_counted_once() -> None:
    """Was "4.8%, 0.8% to 22.7%, 1 / 21" from 6 distinct judged turns."""
    jt = _seven_arm_judgments()
    assert set(turn_roots(jt)) == {"root", "forked"}
    r = failure_rates(distinct_ratings(jt), by=("condition",)).iloc[0]
    assert (r["n_fail"], r["n_rated"]) == (1, 6)
    conv = failure_rates(
        distinct_ratings(jt, "conversation"), by=("condition",), level="conversation"
    )
    assert (conv.iloc[0]["n_fail"], conv.iloc[0]["n_rated"]) == (1, 2)  # root and forked arm


def test_a_forked_arm_keeps_its_own_turns_and_drops_its_copied_prefix() -> None:
    jt = _seven_arm_judgments()
    jt.loc[jt["conversation_id"] == "forked", "fork_turn"] = 4.0  # shares turns 0-3 with root
    kept = distinct_ratings(jt)
    assert sorted(zip(kept["conversation_id"], kept["turn_index"])) == [
        ("forked", 5), ("root", 1), ("root", 3), ("root", 5)
    ]  # fmt: skip


# -------------------------------------------------------------------------- Wilcoxon


def test_wilcoxon_on_small_tied_groups_is_exact_and_fast() -> None:
    """scipy fell into a permutation test here (37 of 44 s of a 288-conversation analysis)."""
    import time

    rng = np.random.default_rng(3)
    a, b = rng.choice([0, 0.5, 1], 12), rng.choice([0, 0.5, 1], 12)
    w = wilcoxon_paired(a, b)
    d = np.round(b - a, 9)
    ref = stats.wilcoxon(d[d != 0], method=stats.PermutationMethod(n_resamples=np.inf))
    assert w.pvalue == pytest.approx(ref.pvalue) and w.statistic == ref.statistic
    assert w.method.startswith("exact")
    t0 = time.perf_counter()  # scipy took 1.8 s per call on 12 tied pairs
    for _ in range(20):
        wilcoxon_paired(rng.choice([0, 0.5, 1, 1 / 3], 12), rng.choice([0, 0.5, 1, 2 / 3], 12))
    assert time.perf_counter() - t0 < 1.0
    big = wilcoxon_paired(rng.choice([0, 0.5, 1], 200), rng.choice([0, 0.5, 1], 200))
    assert big.method.startswith("normal")


def test_wilcoxon_normal_branch_equals_scipy_with_and_without_ties() -> None:
    """The normal approximation is written out (scipy's wrapper cost a second per thousand
    contrasts); its statistic and p must be scipy's, tie correction included."""
    import warnings

    rng = np.random.default_rng(11)
    for i in range(200):
        n = int(rng.integers(120, 400))  # over WILCOXON_EXACT_MAX once ties at 0 drop
        if i % 2:
            a, b = rng.random(n), rng.random(n) + 0.05
        else:
            a, b = rng.choice([0, 0.25, 0.5, 1], n), rng.choice([0, 0.5, 0.75, 1], n)
        w = wilcoxon_paired(a, b)
        d = np.round(b - a, 9)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = stats.wilcoxon(d[d != 0], method="asymptotic")
        assert w.method.startswith("normal")
        assert w.statistic == ref.statistic
        assert w.pvalue == pytest.approx(ref.pvalue, rel=1e-12, abs=1e-300)


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_mcnemar_p_equals_binomtest_for_every_count_up_to_120_and_large_ones() -> None:
    """McNemar's p is computed for all groups at once (binomtest cost 1.3 ms a pair); it must be
    binomtest's number, including 91 of 181 (1.0, where 2 P(X <= k) gives 0.9999999999999998)."""
    from branchpoint.analysis.stats.inference import binomial_half_p

    grid = np.array([(b, c) for b in range(121) for c in range(121)])
    rng = np.random.default_rng(7)
    big = rng.integers(0, 4000, size=(400, 2))
    counts = np.vstack([grid, big, [[91, 90], [0, 0]]])
    got = binomial_half_p(counts[:, 0], counts[:, 1])
    want = [stats.binomtest(int(b), int(b + c), 0.5).pvalue if b + c else 1.0 for b, c in counts]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-300)
    assert got[-2] == 1.0 and got[-1] == 1.0


# -------------------------------------------------------------------------- smaller items


def test_friedman_rounds_before_ranking() -> None:
    """0.1 + 0.2 and 0.3 tie: no arm ranks above another (was chi2 12, p 0.0025 on 6 blocks)."""
    from branchpoint.analysis.stats.inference import friedman

    n = 6
    res = friedman([np.full(n, 0.3), np.full(n, 0.1 + 0.2), np.full(n, 0.3)])
    assert res.statistic == 0.0 and res.pvalue == 1.0


def test_the_intention_to_treat_interval_follows_ci() -> None:
    """The ITT interval ignored ``ci`` (always 95%)."""
    rng = np.random.default_rng(5)
    frame = _pairs_frame(
        {"x": [[(int(rng.integers(0, 3)), 4, int(rng.integers(0, 4)), 4) for _ in range(3)]
               for _ in range(12)]}
    )  # fmt: skip
    wide = matched_contrasts(frame, {"limit": "accept_limit"}, ci=0.95).contrasts.iloc[0]
    narrow = matched_contrasts(frame, {"limit": "accept_limit"}, ci=0.5).contrasts.iloc[0]
    assert narrow["ci_high_itt"] - narrow["ci_low_itt"] < wide["ci_high_itt"] - wide["ci_low_itt"]
    assert narrow["ci_low_itt"] == pytest.approx(narrow["ci_low"])  # every pair realised


def test_kappa_and_alpha_have_bootstrap_intervals_over_conversations() -> None:
    from branchpoint.analysis.raters.agreement import agreement_report

    rng = np.random.default_rng(2)
    levels = np.array(["pass", "partial", "fail"])
    a = rng.integers(0, 3, 240)
    b = np.clip(a + rng.integers(-1, 2, 240), 0, 2)
    rows = []
    for judge, v in (("j1", a), ("j2", b)):
        for i, x in enumerate(v):
            rows.append({"conversation_id": f"c{i // 6}", "turn_index": i % 6, "rubric_id": "r",
                         "criterion_id": "x", "judge": judge, "applicable": True,
                         "verdict": levels[x]})  # fmt: skip
    res = agreement_report(pd.DataFrame(rows))
    row = res.pairs[res.pairs["criterion_id"] == "(all)"].iloc[0]
    assert row["kappa_ci_low"] < row["kappa_quadratic"] < row["kappa_ci_high"]
    assert row["alpha_ci_low"] < row["alpha_ordinal"] < row["alpha_ci_high"]
    assert row["interval"] == "cluster bootstrap over conversations"


def test_drawn_sign_patterns_are_those_of_rng_choice() -> None:
    """Above the exact limit the sign-flip patterns are drawn in blocks of 0/1 integers, for
    speed: the very patterns ``rng.choice([-1, 1])`` drew before, so p-values do not move."""
    import numpy as np

    from branchpoint.analysis.stats.inference import (
        SIGN_FLIP_DRAWS,
        SIGN_FLIP_EXACT_MAX,
        _sign_patterns,
    )

    s = SIGN_FLIP_EXACT_MAX + 5
    want = np.random.default_rng(0).choice(np.array([-1.0, 1.0]), size=(SIGN_FLIP_DRAWS, s))
    assert np.array_equal(_sign_patterns(s).astype(float), want)


@pytest.mark.parametrize("s", [1, 7, 15, pytest.param(20, marks=pytest.mark.slow), 27, 40])
def test_sign_flip_p_and_interval_count_every_pattern_as_the_direct_product_does(s: int) -> None:
    """The p-value counts the patterns by halves (to 20 scenarios) or by byte tables (drawn
    patterns), for speed: the same count as the product of every pattern with the values, and
    the interval's ends are where that count's p crosses 0.05."""
    from branchpoint.analysis.stats.inference import _sign_patterns, round_ties

    rng = np.random.default_rng(s)
    x = np.round(rng.normal(0.15, 0.5, s), 2)  # rounded: ties between pattern sums

    def direct(d: float) -> float:
        y = round_ties(x - d)
        signs = _sign_patterns(s)
        hits = sum(int(np.sum(np.abs(signs[i : i + (1 << 16)].astype(float) @ y)
                              >= abs(y.sum()) - 1e-9))
                   for i in range(0, len(signs), 1 << 16))  # fmt: skip
        return hits / len(signs)

    assert sign_flip_pvalue(x) == pytest.approx(direct(0.0), abs=1e-12)
    lo, hi = sign_flip_interval(x)
    if s < 6:
        assert np.isnan(lo) and np.isnan(hi)
        return
    assert direct(lo - 1e-7) <= 0.05 < direct(lo + 1e-7)
    assert direct(hi + 1e-7) <= 0.05 < direct(hi - 1e-7)
