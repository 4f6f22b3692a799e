"""Time to the first failure (issue 46): Kaplan-Meier figures equal lifelines' to 1e-9, censoring
says why a conversation ended, a failure before the fork is a failure of both arms, a planted
earlier failure is found by the matched comparison, and the report and export carry it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures.cli_in_process import run_in_process

from branchpoint.analysis.survival.compare import conversation_pairs, matched_time_to_failure
from branchpoint.analysis.survival.first_failure import ANY, ENDINGS, FAILED, first_failures
from branchpoint.analysis.survival.kaplan_meier import kaplan_meier, logrank
from branchpoint.analysis.survival.section import first_failure_table
from branchpoint.analysis.testing.synthetic import Effect, TeenDesign, write_teen_store
from branchpoint.core.store import open_store

lifelines = pytest.importorskip("lifelines")  # the [test] extra
# lifelines' own pandas calls, not ours
pytestmark = pytest.mark.filterwarnings("ignore:Starting with pandas version 4.0")


def _lifelines_km(t: np.ndarray, e: np.ndarray) -> lifelines.KaplanMeierFitter:
    return lifelines.KaplanMeierFitter().fit(t, e)


def _check_against_lifelines(t: np.ndarray, e: np.ndarray, tau: float) -> None:
    from lifelines.utils import restricted_mean_survival_time

    ref = _lifelines_km(t, e)
    km = kaplan_meier(t, e)
    sf = ref.survival_function_["KM_estimate"]
    assert np.array_equal(sf.index.to_numpy(float), km.timeline)
    assert np.max(np.abs(sf.to_numpy() - km.survival)) <= 1e-9
    ci = ref.confidence_interval_.to_numpy()
    assert np.max(np.abs(ci[:, 0] - km.ci_low)) <= 1e-9
    assert np.max(np.abs(ci[:, 1] - km.ci_high)) <= 1e-9
    assert abs(restricted_mean_survival_time(ref, t=tau) - km.restricted_mean(tau)) <= 1e-9
    # lifelines multiplies in logs: where S(t) is exactly 0.5 it holds 0.5000000000000001 and
    # puts the median one time later; elsewhere the medians agree
    if not np.any(np.abs(km.survival - 0.5) < 1e-12):
        assert ref.median_survival_time_ == km.median


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_kaplan_meier_equals_lifelines_to_1e9_on_random_data_with_ties_and_censoring() -> None:
    from lifelines.statistics import logrank_test

    rng = np.random.default_rng(46)
    for _ in range(60):
        n = int(rng.integers(3, 120))
        t = rng.integers(1, 15, n).astype(float)  # exchanges: many ties
        e = (rng.random(n) < rng.random()).astype(int)
        _check_against_lifelines(t, e, float(rng.integers(1, 15)))
        g = rng.random(n) < 0.5
        if g.all() or not g.any():
            continue
        ref = logrank_test(t[~g], t[g], e[~g], e[g])
        mine = logrank(t, e, g.astype(int))
        assert abs(ref.test_statistic - mine.statistic) <= 1e-9
        assert abs(ref.p_value - mine.pvalue) <= 1e-9


def test_the_median_where_the_curve_is_exactly_one_half_is_that_exchange() -> None:
    # 4 conversations: failures at exchanges 1 and 2, two censored at 3: S(2) = 2/4 exactly
    km = kaplan_meier(np.array([1.0, 2.0, 3.0, 3.0]), np.array([1, 1, 0, 0]))
    assert km.survival[2] == 0.5 and km.median == 2.0
    assert kaplan_meier(np.array([3.0, 3.0]), np.array([0, 0])).median == np.inf


def test_stratified_log_rank_sums_the_strata_and_compares_within_them() -> None:
    from lifelines.statistics import logrank_test

    rng = np.random.default_rng(1)
    t = rng.integers(1, 9, 80).astype(float)
    e = (rng.random(80) < 0.7).astype(int)
    g = np.tile([0, 1], 40)
    s = np.repeat([0, 1], 40)
    strat = logrank(t, e, g, s)
    parts = [logrank(t[s == k], e[s == k], g[s == k]) for k in (0, 1)]
    assert strat.n_strata == 2
    assert np.isclose(strat.observed_minus_expected, sum(p.observed_minus_expected for p in parts))
    assert np.isclose(strat.variance, sum(p.variance for p in parts))
    one = logrank_test(t[(s == 0) & (g == 0)], t[(s == 0) & (g == 1)],
                       e[(s == 0) & (g == 0)], e[(s == 0) & (g == 1)])  # fmt: skip
    assert abs(parts[0].pvalue - one.p_value) <= 1e-9
    # a group that is one stratum's only members is compared with nobody: no evidence
    assert logrank(t[:4], e[:4], np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1])).pvalue == 1.0


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # scripted:new fails more on no_diagnosis in the push_back arm: it fails sooner there
    db = tmp_path_factory.mktemp("ttf") / "planted.db"
    d = TeenDesign(
        n_scenarios=20, targets=("scripted:new", "scripted:old"), conditions=("none",),
        replicates=2, criteria={"no_diagnosis": "medical_boundaries",
                                "self_harm_response": "acute_harm"},
        effects=(Effect("limit", "push_back", ("no_diagnosis",), 0.3, 0.5),), base_fail=0.15,
    )  # fmt: skip
    write_teen_store(db, d, seed=5)
    with sqlite3.connect(db) as con:  # how some conversations ended, as the engine records it
        ids = [r[0] for r in con.execute("select id from conversations order by id")]
        for cid, why in zip(ids[:3], ["persona_ended", "target_error", "stopped_by_budget"]):
            con.execute("update conversations set stop_reason = ? where id = ?", (why, cid))
    return db


@pytest.mark.slow
def test_the_store_s_curves_equal_lifelines_and_censoring_names_the_ending(planted: Path) -> None:
    ff = first_failure_table(open_store(planted, create=False))
    anyc = ff[ff["outcome"] == ANY]
    for _, g in anyc.groupby("target"):
        _check_against_lifelines(g["time"].to_numpy(float), g["event"].to_numpy(int), 8.0)
    with sqlite3.connect(planted) as con:
        why = dict(con.execute("select id, stop_reason from conversations where stop_reason "
                               "is not null").fetchall())  # fmt: skip
    censored = ff[(ff["event"] == 0) & ff["conversation_id"].isin(why)]
    for row in censored.itertuples():
        assert row.ending == ENDINGS[why[row.conversation_id]] and row.time == row.n_exchanges
    failed = ff[ff["event"] == 1]
    assert (failed["ending"] == FAILED).all() and (failed["time"] <= failed["n_exchanges"]).all()
    rest = ff[(ff["event"] == 0) & ~ff["conversation_id"].isin(why)]
    assert (rest["ending"] == ENDINGS["max_turns"]).all()


def _fork_frame() -> pd.DataFrame:
    """Two arms of one tree: B copies A's first 4 turns (2 exchanges) and forks at turn 4; A's
    reply of exchange 2 failed, so B carries that failure (its copied verdict)."""
    rows = []
    for cid, parent, verdicts in (("A", None, ["pass", "fail", "pass"]),
                                  ("B", "A", ["pass", "fail", "fail"])):  # fmt: skip
        for x, v in enumerate(verdicts, start=1):
            rows.append({"conversation_id": cid, "run_id": "r", "scenario_id": "s",
                         "variant_id": cid, "target": "t", "condition": "none", "simulator": "p",
                         "replicate": 0, "rubric_id": "teen", "judge": "j", "criterion_id": "c",
                         "exchange": x, "turn_index": 2 * x - 1, "applicable": True, "verdict": v,
                         "parent_id": parent, "fork_turn": 4 if parent else None,
                         "choice:limit": "push_back" if parent else "accept_limit"})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_failure_before_the_fork_is_a_failure_of_both_arms_at_that_exchange() -> None:
    ff = first_failures(_fork_frame())
    got = ff[ff["outcome"] == ANY].set_index("conversation_id")
    assert got.loc["A", "time"] == got.loc["B", "time"] == 2
    assert got.loc["A", "event"] == got.loc["B", "event"] == 1
    pairs = pd.DataFrame({"conversation_id_a": ["A"], "conversation_id_b": ["B"],
                          "scenario_id": ["s"], "contrast": ["limit"]})  # fmt: skip
    m = matched_time_to_failure(ff, pairs, ["contrast"])
    assert (m["rmst_diff"] == 0).all()


@pytest.mark.slow
def test_the_matched_comparison_finds_the_planted_earlier_failure(planted: Path) -> None:
    from branchpoint.analysis.chatbots.alignment import Side, align
    from branchpoint.analysis.chatbots.comparison import compare_chatbots, time_to_failure

    store = open_store(planted, create=False)
    aligned = align(Side(store, "scripted:old"), Side(store, "scripted:new"), two_stores=False)
    ttf = time_to_failure(aligned, compare_chatbots(aligned))["by_arm"]
    push = ttf[ttf["arm"].str.contains("push_back") & (ttf["outcome"] == "no_diagnosis")]
    assert len(push) == 1
    row = push.iloc[0]
    assert row["rmst_diff"] < 0 and row["ci_high"] < 0 and row["p_scenario_holm"] < 0.05
    assert row["p_logrank"] < 0.05
    others = ttf[~ttf["arm"].str.contains("push_back") & (ttf["outcome"] == "no_diagnosis")]
    assert (others["p_scenario_holm"] > 0.05).all()
    pairs = conversation_pairs(compare_chatbots(aligned).pairs, ["condition"])
    assert pairs[["conversation_id_a", "conversation_id_b"]].duplicated().sum() == 0


@pytest.mark.slow
def test_report_has_the_curves_and_export_writes_one_row_per_conversation(
    planted: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    res = run_in_process("report", "--all", "--db", str(planted), "--out", str(out),
                         "--n-boot", "50")  # fmt: skip
    assert res.returncode == 0, res.stderr
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Time to the first failure" in md and "(time_to_failure.png)" in md
    assert (out / "time_to_failure.png").stat().st_size > 1000
    assert "limit: accept\\_limit → push\\_back" in md.split("## Time to the first failure")[1]
    csv = tmp_path / "ff.csv"
    res = run_in_process("export", "--all", "--db", str(planted), "--level", "first-failure",
                         "--out", str(csv))  # fmt: skip
    assert res.returncode == 0, res.stderr
    table = pd.read_csv(csv)
    with sqlite3.connect(planted) as con:
        n_conv = con.execute("select count(*) from conversations").fetchone()[0]
    assert (table["outcome"] == ANY).sum() == n_conv
    assert {"time", "event", "ending", "n_exchanges", "arm"} <= set(table.columns)


def _ff(time: np.ndarray, event: np.ndarray, group: np.ndarray | None = None) -> pd.DataFrame:
    """A first-failure frame (one outcome, one judge) for the given times and events."""
    n = len(time)
    return pd.DataFrame({
        "conversation_id": [f"c{i}" for i in range(n)], "rubric_id": "r", "judge": "j",
        "outcome": ANY, "time": np.asarray(time, float), "event": np.asarray(event, int),
        "ending": [FAILED if e else ENDINGS["persona_ended"] for e in event],
        "target": "t" if group is None else group,
    })  # fmt: skip


def test_the_matched_comparison_runs_the_sign_flip_test_at_ten_scenarios_too() -> None:
    """The primary test is the sign-flip test over the scenario restricted-mean differences at
    any number of scenarios (the t-test over them rejected 5.2% of simulated nulls at 10): its p
    is the share of the 2^10 sign patterns at least as extreme, its interval that test's
    inversion. Failed before, which ran the t-test from 6 scenarios."""
    from branchpoint.analysis.stats.inference import SIGN_FLIP, sign_flip_pvalue

    rng = np.random.default_rng(7)
    s, per = 10, 6
    t = rng.integers(1, 9, 2 * s * per).astype(float)
    e = (rng.random(2 * s * per) < 0.7).astype(int)
    ff = _ff(t, e)
    ids = ff["conversation_id"].to_numpy()
    pairs = pd.DataFrame({"conversation_id_a": ids[0::2], "conversation_id_b": ids[1::2],
                          "scenario_id": np.repeat([f"s{i}" for i in range(s)], per),
                          "contrast": "b vs a"})  # fmt: skip
    row = matched_time_to_failure(ff, pairs, ["contrast"]).iloc[0]
    assert row["test"] == SIGN_FLIP and row["interval"] == "exact sign-flip over 10 scenario means"
    ta, ea, tb, eb = t[0::2], e[0::2], t[1::2], e[1::2]
    tau = min(ta.max(), tb.max())
    sc = np.repeat(np.arange(s), per)
    diffs = np.array([kaplan_meier(tb[sc == i], eb[sc == i]).restricted_mean(tau)
                      - kaplan_meier(ta[sc == i], ea[sc == i]).restricted_mean(tau)
                      for i in range(s)])  # fmt: skip
    signs = 1 - 2 * ((np.arange(2**s)[:, None] >> np.arange(s)) & 1)
    enumerated = np.mean(np.abs(signs @ diffs) >= abs(diffs.sum()) - 1e-9)
    assert row["p_scenario"] == pytest.approx(enumerated, abs=1e-12)
    assert row["rmst_diff"] == pytest.approx(diffs.mean())
    for end, inward in ((row["ci_low"], 1e-7), (row["ci_high"], -1e-7)):
        assert (
            sign_flip_pvalue(diffs - (end - inward))
            <= 0.05
            < sign_flip_pvalue(diffs - (end + inward))
        )


def test_a_median_whose_band_crosses_one_half_within_one_exchange_has_a_positive_width() -> None:
    """100 conversations: 30 fail at exchange 1, 40 at 2, 30 censored at 3. S(1) = 0.7 with its
    band above 0.5, S(2) = 0.3 with its band below: the discrete reading gave "2 (2 to 2)", zero
    width from sampled data. On the continuous-time reading (a failure at exchange 2 happened
    after the end of exchange 1) the median lies between 1 and 2."""
    from branchpoint.analysis.survival.compare import km_summary
    from branchpoint.analysis.survival.section import _median

    t = np.repeat([1.0, 2.0, 3.0], [30, 40, 30])
    e = np.repeat([1, 1, 0], [30, 40, 30])
    km = kaplan_meier(t, e)
    assert km.ci_low[1] > 0.5 and km.ci_high[2] < 0.5  # the band crosses within exchange 2
    row = km_summary(_ff(t, e), ["target"]).iloc[0]
    assert (row["median"], row["median_ci_low"], row["median_ci_high"]) == (2.0, 1.0, 2.0)
    assert _median(row) == "2 (1 to 2)"


def test_median_intervals_from_sampled_data_have_positive_width_or_are_not_given() -> None:
    """Property over generated data (150 groups of 1 to 300 conversations, whole exchanges 1
    to 20 with many ties, any censoring): every median interval given is at least one exchange
    wide, or an end is not given (infinite); a finite lower end is below the median, and the
    median is at or below the upper end. Failed before (zero-width intervals)."""
    from branchpoint.analysis.stats.intervals import has_valid_width
    from branchpoint.analysis.survival.compare import km_summary

    rng = np.random.default_rng(4646)
    frames = []
    for g in range(150):
        n = int(rng.integers(1, 300))
        t = rng.integers(1, int(rng.integers(2, 21)), n).astype(float)
        e = (rng.random(n) < rng.random()).astype(int)
        frames.append(_ff(t, e, np.full(n, f"g{g}")).assign(
            conversation_id=[f"g{g}-{i}" for i in range(n)]))  # fmt: skip
    tab = km_summary(pd.concat(frames, ignore_index=True), ["target"])
    assert len(tab) == 150
    lo, hi, med = (tab[c].to_numpy() for c in ("median_ci_low", "median_ci_high", "median"))
    given = np.isfinite(lo) & np.isfinite(hi)
    assert given.sum() > 50  # the property was exercised, not vacuous
    assert (hi[given] - lo[given] >= 1).all()
    # an end the band never reaches is infinite here: not given (NaN to the rule's helper)
    not_given = np.where(given, 0.0, np.nan)
    assert all(has_valid_width(a, b, n) for a, b, n in zip(lo + not_given, hi, tab["n"]))
    assert not (np.isfinite(hi) & ~np.isfinite(lo)).any()  # an upper end alone is never given
    assert (lo[np.isfinite(lo)] >= 0).all()
    has = np.isfinite(med)
    assert (lo[has] < med[has]).all() and (med[has] <= hi[has]).all()


@pytest.mark.parametrize(("events", "expected"), [
    ([1], "1 conversation; per judge, 1 conversation x judge row with a failure."),
    ([1, 0], "2 conversations; per judge, 1 conversation x judge row with a failure."),
    ([0, 0], "2 conversations; per judge, 0 conversation x judge rows with a failure."),
])  # fmt: skip
def test_the_counts_line_agrees_in_number(events: list[int], expected: str) -> None:
    """The demo's report said '1 conversations ...; 1 conversation x judge rows'."""
    from branchpoint.analysis.survival.summary import TimeToFailure

    ff = pd.DataFrame({"conversation_id": [f"c{i}" for i in range(len(events))], "event": events})
    assert TimeToFailure(first_failures=ff).counts_line() == expected


def test_a_side_that_fails_at_exchange_1_is_followed_to_the_end_not_to_its_failure() -> None:
    """Every conversation of A failed at exchange 1, none of B's in 2 exchanges: tau was the
    smaller side's latest *time* (1, A's failure), so both restricted means were 1 and the
    primary test said +0.00, p 1, beside a log-rank p of 1e-17. tau is the follow-up (the last
    exchange judged, 2), and B lasts longer."""
    from branchpoint.analysis.survival.compare import km_summary

    n_scen, per = 6, 4
    rows, pairs = [], []
    for s in range(n_scen):
        for k in range(per):
            a, b = f"a{s}-{k}", f"b{s}-{k}"
            rows += [(a, 1.0, 1, 2.0, "A"), (b, 2.0, 0, 2.0, "B")]
            pairs.append({"conversation_id_a": a, "conversation_id_b": b, "scenario_id": f"s{s}",
                          "contrast": "B vs A"})  # fmt: skip
    ff = pd.DataFrame(rows, columns=["conversation_id", "time", "event", "n_exchanges", "target"])
    ff = ff.assign(rubric_id="teen", judge="j", outcome=ANY,
                   ending=np.where(ff["event"] == 1, FAILED, "last exchange reached"))  # fmt: skip
    got = matched_time_to_failure(ff, pd.DataFrame(pairs), ["contrast"]).iloc[0]
    assert got["tau"] == 2.0
    assert got["rmst_a"] == 1.0 and got["rmst_b"] == 2.0 and got["rmst_diff"] == 1.0
    # every scenario +1: the sign-flip p (2/64) and rule 3's worst-case interval within -2..2
    assert got["p_scenario"] < 0.05 and got["ci_low"] < 1.0 < got["ci_high"] <= 2.0
    per_target = km_summary(ff, ["target"]).set_index("target")
    assert per_target.loc["A", "tau"] == 2.0 and per_target.loc["A", "rmst"] == 1.0
