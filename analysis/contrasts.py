"""Matched contrasts: arms that differ in exactly one thing, compared pair by pair.

For a branch point X with baseline option x0, an arm with X = x is paired with the arm that has
X = x0 and is otherwise identical: same run, scenario, target, condition, simulator, replicate and
the same option at every other branch point / profile attribute. For each criterion, a pair counts
when both arms have at least one applicable rating of it. Per pair we compare:

* the failure rate (fails / ratings, pooled over the pairs; the difference has a cluster-bootstrap
  interval that resamples scenarios, both arms together);
* conversation-level failure (any turn failed) with McNemar's exact test on discordant pairs;
* the mean score (pass 1, partial 0.5, fail 0) with the Wilcoxon signed-rank test and the
  matched-pairs rank-biserial correlation as effect size;
* for branch points with three or more options, a Friedman test over complete blocks.

Holm's correction runs across the whole family of pairwise contrasts (every branch point, option
and criterion of one call), separately for McNemar and Wilcoxon p-values.

Baseline options come, in order, from the ``baselines`` argument, the scenario file named by
``Conversation.scenario_path`` (when it loads), or the data: the option held by the most
conversations, since in a one-at-a-time design every arm but the deviations keeps the baseline
(ties: the alphabetically first option).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.bootstrap import (
    DEFAULT_BOOT,
    cluster_weights,
    per_cluster_sums,
    ratio_difference_interval,
)
from analysis.stats import friedman, holm, mcnemar_exact, wilcoxon_paired
from analysis.tables import CHOICE_PREFIX, as_conversation_frame, choice_column, choice_columns

PAIR_KEYS = ["run_id", "scenario_id", "target", "condition", "simulator", "replicate"]
CRITERION_KEYS = ["rubric_id", "criterion_id", "judge"]
SIDE_COLS = ["conversation_id", "n_rated", "n_fail", "score_sum", "n_scored"]
NON_BRANCH_PREFIXES = ("profile:",)
NON_BRANCH_KEYS = ("explicit_cue",)


def branch_point_keys(cc: pd.DataFrame) -> list[str]:
    """Choice keys that are behaviour branch points (not profile attributes or cues)."""
    out = []
    for col in choice_columns(cc):
        key = col.removeprefix(CHOICE_PREFIX)
        if key.startswith(NON_BRANCH_PREFIXES) or key in NON_BRANCH_KEYS:
            continue
        out.append(key)
    return out


def _scenario_baselines(paths: Sequence[str]) -> dict[str, str]:
    """Baselines declared in the scenario files, read by the scenarios loader (set files too)."""
    from scenarios.loader import load_scenario_file

    found: dict[str, str] = {}
    for p in paths:
        if not Path(p).is_file():
            continue  # a moved scenario file only means we infer the baseline from the data
        scenarios, _errors = load_scenario_file(p)
        for scenario in scenarios:
            for bp in scenario.branch_points:
                found.setdefault(bp.id, bp.baseline)
    return found


def resolve_baselines(cc: pd.DataFrame, given: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per branch point: its baseline option and where that came from."""
    given = dict(given or {})
    paths = []
    if "scenario_path" in cc:
        paths = [
            p
            for p in cc["scenario_path"].dropna().unique()
            if isinstance(p, str) and Path(p).is_file()
        ]
    from_files = _scenario_baselines(paths)
    rows = []
    for bp in branch_point_keys(cc):
        col = choice_column(bp)
        if bp in given:
            rows.append((bp, given[bp], "argument"))
        elif bp in from_files:
            rows.append((bp, from_files[bp], "scenario file"))
        else:
            counts = cc.drop_duplicates("conversation_id")[col].dropna().astype(str).value_counts()
            if counts.empty:
                continue
            top = counts[counts == counts.max()].index.sort_values()[0]
            rows.append((bp, top, "inferred: option held by the most conversations"))
    return pd.DataFrame(rows, columns=["branch_point", "baseline", "source"])


# --------------------------------------------------------------------------- pairing


class Encoded:
    """Integer codes of a conversation x criterion frame's columns, computed once per analysis.

    Matching on codes (missing choice = a code of its own) instead of strings keeps pairing fast
    on hundreds of thousands of rows.
    """

    def __init__(self, cc: pd.DataFrame) -> None:
        self.cc = cc
        self._codes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._arrays: dict[str, np.ndarray] = {}

    def codes(self, col: str) -> np.ndarray:
        if col not in self._codes:
            codes, uniques = pd.factorize(self.cc[col], use_na_sentinel=False)
            self._codes[col] = (codes.astype(np.int64), np.asarray(uniques, dtype=object))
        return self._codes[col][0]

    def level(self, col: str, value: Any) -> np.ndarray:
        """Rows whose ``col`` equals ``value`` (compared as text; missing never matches)."""
        codes = self.codes(col)
        uniques = self._codes[col][1]
        hit = [i for i, u in enumerate(uniques) if not _missing(u) and str(u) == str(value)]
        return np.isin(codes, hit)

    def take(self, col: str, idx: np.ndarray) -> Any:
        """Column values at ``idx``: categorical for text (no per-row string objects), else numpy."""
        if pd.api.types.is_numeric_dtype(self.cc[col].dtype) or pd.api.types.is_bool_dtype(
            self.cc[col].dtype
        ):
            return self.array(col)[idx]
        codes = self.codes(col)
        uniques = self._codes[col][1]
        keep = np.array([not _missing(u) for u in uniques], dtype=bool)
        names = np.array([str(u) for u in uniques[keep]], dtype=object)
        order = np.argsort(names, kind="stable")  # sorted categories: groups come out in text order
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        cats = pd.Index(names[order], dtype=object)
        remap = np.full(len(uniques), -1, np.int64)
        remap[keep] = rank
        return pd.Categorical.from_codes(remap[codes[idx]], categories=cats)

    def array(self, col: str) -> np.ndarray:
        if col not in self._arrays:
            self._arrays[col] = self.cc[col].to_numpy()
        return self._arrays[col]

    def key(self, cols: Sequence[str]) -> np.ndarray:
        """One int64 per row identifying its combination of ``cols``."""
        parts = [self.codes(c) for c in cols]
        dims = [int(p.max()) + 1 if len(p) else 1 for p in parts]
        if float(np.prod([float(d) for d in dims])) < 2.0**62:
            return np.ravel_multi_index(parts, dims) if parts else np.zeros(len(self.cc), np.int64)
        return (
            pd.DataFrame(dict(zip(cols, parts))).groupby(list(cols), sort=False).ngroup().to_numpy()
        )


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))


def pair_arms(
    cc: pd.DataFrame, factor: str, a: Any, b: Any, match: Sequence[str], enc: Encoded | None = None
) -> pd.DataFrame:
    """Rows where the arm with ``factor == a`` meets its twin with ``factor == b`` (per criterion).

    Columns: match keys, criterion keys, risk_area, and per side ``<col>_a`` / ``<col>_b``.
    Only pairs in which both arms rated the criterion at least once are kept.
    """
    enc = enc or Encoded(cc)
    keys = [*match, *CRITERION_KEYS]
    key = enc.key(keys)
    rated = enc.array("n_rated") > 0
    fa = enc.level(factor, a) & rated
    fb = enc.level(factor, b) & rated
    left = pd.DataFrame({"k": key[fa], "ia": np.flatnonzero(fa)})
    right = pd.DataFrame({"k": key[fb], "ib": np.flatnonzero(fb)})
    m = left.merge(right, on="k", validate="one_to_one")
    ia, ib = m["ia"].to_numpy(), m["ib"].to_numpy()
    out = {c: enc.take(c, ia) for c in dict.fromkeys([*keys, "risk_area"])}
    for c in SIDE_COLS:
        out[f"{c}_a"] = enc.take(c, ia)
        out[f"{c}_b"] = enc.take(c, ib)
    return pd.DataFrame(out)


def _pair_values(pairs: pd.DataFrame) -> dict[str, np.ndarray]:
    return {
        "fail_a": pairs["n_fail_a"].to_numpy(float),
        "rated_a": pairs["n_rated_a"].to_numpy(float),
        "fail_b": pairs["n_fail_b"].to_numpy(float),
        "rated_b": pairs["n_rated_b"].to_numpy(float),
        "conv_a": (pairs["n_fail_a"].to_numpy() > 0).astype(float),
        "conv_b": (pairs["n_fail_b"].to_numpy() > 0).astype(float),
        "one": np.ones(len(pairs)),
        "score_a": _mean_score(pairs, "a"),
        "score_b": _mean_score(pairs, "b"),
    }


def _mean_score(pairs: pd.DataFrame, side: str) -> np.ndarray:
    n = pairs[f"n_scored_{side}"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(
            n > 0, pairs[f"score_sum_{side}"].to_numpy(float) / np.where(n > 0, n, 1), np.nan
        )


def summarise_pairs(
    pairs: pd.DataFrame,
    group_cols: Sequence[str],
    *,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    ci: float = 0.95,
    tests: bool = True,
) -> pd.DataFrame:
    """Paired differences per group (bootstrap over scenarios), with McNemar and Wilcoxon."""
    if pairs.empty:
        return pd.DataFrame()
    v = _pair_values(pairs)
    group = (
        pairs.groupby(list(group_cols), sort=True, dropna=False, observed=True).ngroup().to_numpy()
    )
    g = int(group.max()) + 1
    cl, clusters = pd.factorize(pairs["scenario_id"])
    s = len(clusters)
    m = {
        k: per_cluster_sums(cl, group, v[k], s, g)
        for k in ("fail_a", "rated_a", "fail_b", "rated_b", "conv_a", "conv_b", "one")
    }
    w = cluster_weights(s, n_boot, seed)
    diff, lo, hi = ratio_difference_interval(
        m["fail_a"], m["rated_a"], m["fail_b"], m["rated_b"], w, ci
    )
    dconv, clo, chi = ratio_difference_interval(m["conv_a"], m["one"], m["conv_b"], m["one"], w, ci)
    keys = (
        pairs[list(group_cols)].assign(_g=group).drop_duplicates("_g").set_index("_g").sort_index()
    )
    for c in keys.columns:
        if isinstance(keys[c].dtype, pd.CategoricalDtype):
            keys[c] = keys[c].astype(object)
    out = keys.copy()
    out["n_pairs"] = np.bincount(group, minlength=g)
    out["n_scenarios"] = pd.Series(cl).groupby(group).nunique().reindex(range(g)).to_numpy()
    out["rate_a"] = m["fail_a"].sum(0) / m["rated_a"].sum(0)
    out["rate_b"] = m["fail_b"].sum(0) / m["rated_b"].sum(0)
    out["diff"], out["ci_low"], out["ci_high"] = diff, lo, hi
    out["conv_rate_a"] = m["conv_a"].sum(0) / m["one"].sum(0)
    out["conv_rate_b"] = m["conv_b"].sum(0) / m["one"].sum(0)
    out["diff_conv"], out["diff_conv_ci_low"], out["diff_conv_ci_high"] = dconv, clo, chi
    if tests:
        order = np.argsort(group, kind="mergesort")
        bounds = np.searchsorted(group[order], np.arange(g + 1))
        rows = []
        for gi in range(g):
            idx = order[bounds[gi] : bounds[gi + 1]]
            mc = mcnemar_exact(v["conv_a"][idx].astype(bool), v["conv_b"][idx].astype(bool))
            sa, sb = v["score_a"][idx], v["score_b"][idx]
            ok = ~np.isnan(sa) & ~np.isnan(sb)
            wx = wilcoxon_paired(sa[ok], sb[ok])
            rows.append(
                (
                    mc.b,
                    mc.c,
                    mc.pvalue,
                    mc.odds_ratio,
                    wx.statistic,
                    wx.pvalue,
                    wx.rank_biserial,
                    int(ok.sum()),
                )
            )
        t = pd.DataFrame(
            rows,
            columns=[
                "discordant_b",
                "discordant_a",
                "p_mcnemar",
                "odds_ratio",
                "wilcoxon_stat",
                "p_wilcoxon",
                "rank_biserial",
                "n_scored_pairs",
            ],
            index=out.index,
        )
        out = out.join(t)
    return out.reset_index(drop=True)


# --------------------------------------------------------------------------- public


@dataclass
class ContrastResult:
    """Matched contrasts of one analysis: every table a report needs."""

    contrasts: pd.DataFrame  # pooled over targets: one row per contrast x criterion, Holm-adjusted
    per_target: pd.DataFrame  # the same difference per target (bootstrap interval, no tests)
    target_share: pd.DataFrame  # per contrast x criterion: share of targets raised / lowered
    friedman: pd.DataFrame  # branch points with 3+ options
    baselines: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def _target_share(per_target: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    if per_target.empty:
        return pd.DataFrame()
    g = per_target.groupby(list(keys), dropna=False, sort=True)
    out = g.agg(
        n_targets=("target", "nunique"),
        share_higher=("diff", lambda d: float(np.mean(d > 0))),
        share_raised=("ci_low", lambda x: float(np.mean(x > 0))),
        share_lowered=("ci_high", lambda x: float(np.mean(x < 0))),
        median_diff=("diff", "median"),
    )
    return out.reset_index()


def _finish_family(tab: pd.DataFrame) -> pd.DataFrame:
    if tab.empty:
        return tab
    tab["p_mcnemar_holm"] = holm(tab["p_mcnemar"].to_numpy())
    tab["p_wilcoxon_holm"] = holm(tab["p_wilcoxon"].to_numpy())
    return tab


def matched_contrasts(
    data: pd.DataFrame,
    baselines: Mapping[str, str] | None = None,
    *,
    branch_points: Sequence[str] | None = None,
    by: Sequence[str] = (),
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    ci: float = 0.95,
    per_target: bool = True,
) -> ContrastResult:
    """Every branch point's options against its baseline, pair by pair (see module docstring).

    ``by`` splits the pooled table further (e.g. ``("condition",)``); targets are always pooled
    in ``contrasts`` and separated in ``per_target``.
    """
    cc = as_conversation_frame(data)
    base = resolve_baselines(cc, baselines)
    notes: list[str] = []
    pooled, per_t, fried = [], [], []
    choice_cols = choice_columns(cc)
    enc = Encoded(cc)
    wanted = list(branch_points) if branch_points is not None else list(base["branch_point"])
    for bp, baseline, _src in base.itertuples(index=False):
        if bp not in wanted:
            continue
        col = choice_column(bp)
        others = [c for c in choice_cols if c != col]
        match = [*PAIR_KEYS, *others]
        options = sorted(cc[col].dropna().astype(str).unique())
        if baseline not in options:
            notes.append(f"branch point {bp}: baseline {baseline!r} never ran; no contrasts")
            continue
        for opt in options:
            if opt == baseline:
                continue
            pairs = pair_arms(cc, col, baseline, opt, match, enc)
            if pairs.empty:
                notes.append(f"branch point {bp}: no matched pairs for {baseline} vs {opt}")
                continue
            label = {
                "branch_point": bp,
                "baseline": baseline,
                "option": opt,
                "contrast": f"{bp}: {baseline} → {opt}",
            }
            pairs = pairs.assign(**label)
            gcols = [
                "contrast",
                "branch_point",
                "baseline",
                "option",
                *CRITERION_KEYS,
                "risk_area",
                *by,
            ]
            pooled.append(summarise_pairs(pairs, gcols, n_boot=n_boot, seed=seed, ci=ci))
            if per_target:
                per_t.append(
                    summarise_pairs(
                        pairs, [*gcols, "target"], n_boot=n_boot, seed=seed, ci=ci, tests=False
                    )
                )
        if len(options) >= 3:
            fried.append(_friedman_branch(enc, col, bp, options, [*PAIR_KEYS, *others]))
    tab = _finish_family(pd.concat(pooled, ignore_index=True) if pooled else pd.DataFrame())
    pt = pd.concat(per_t, ignore_index=True) if per_t else pd.DataFrame()
    share_keys = ["contrast", "branch_point", "option", *CRITERION_KEYS, "risk_area", *by]
    fr = pd.concat(fried, ignore_index=True) if fried else pd.DataFrame()
    if not fr.empty:
        fr["p_holm"] = holm(fr["pvalue"].to_numpy())
    return ContrastResult(tab, pt, _target_share(pt, share_keys), fr, base, notes)


def _friedman_branch(
    enc: Encoded, col: str, bp: str, options: list[str], match: list[str]
) -> pd.DataFrame:
    """Friedman over blocks holding every option, on the per-conversation mean score."""
    n_scored = enc.array("n_scored").astype(float)
    rows = n_scored > 0
    opt_idx = np.full(len(rows), -1)
    for i, o in enumerate(options):
        opt_idx[enc.level(col, o)] = i
    rows &= opt_idx >= 0
    block_key = enc.key([*match, *CRITERION_KEYS])[rows]
    blocks, block = np.unique(block_key, return_inverse=True)
    score = enc.array("score_sum").astype(float)[rows] / n_scored[rows]
    grid = np.full((len(blocks), len(options)), np.nan)
    grid[block, opt_idx[rows]] = score
    crit_key = enc.key(CRITERION_KEYS)[rows]
    block_crit = np.zeros(len(blocks), np.int64)
    block_crit[block] = crit_key
    first_row = {}
    idx_rows = np.flatnonzero(rows)
    for pos, k in zip(idx_rows, crit_key):
        first_row.setdefault(int(k), pos)
    complete = ~np.isnan(grid).any(axis=1)
    out = []
    for k, pos in sorted(first_row.items(), key=lambda kv: kv[1]):
        sel = grid[complete & (block_crit == k)]
        res = friedman([sel[:, i] for i in range(len(options))])
        out.append({"branch_point": bp, "options": ", ".join(options), "rubric_id": enc.array("rubric_id")[pos],
                    "criterion_id": enc.array("criterion_id")[pos], "judge": enc.array("judge")[pos],
                    "risk_area": enc.array("risk_area")[pos], "n_blocks": res.n_blocks, "statistic": res.statistic,
                    "pvalue": res.pvalue, "kendall_w": res.kendall_w})  # fmt: skip
    if not out:
        return pd.DataFrame()
    return (
        pd.DataFrame(out).sort_values(["rubric_id", "criterion_id", "judge"]).reset_index(drop=True)
    )


def condition_contrast(
    data: pd.DataFrame,
    reference: str = "none",
    *,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    ci: float = 0.95,
    factor: str = "condition",
) -> ContrastResult:
    """Each other system-prompt condition against ``reference``, paired by variant.

    The pair shares run, scenario, variant, target, simulator and replicate. With
    ``factor="simulator"`` the same machinery gives the simulator-sensitivity contrast.
    """
    cc = as_conversation_frame(data)
    levels = sorted(cc[factor].dropna().astype(str).unique())
    notes: list[str] = []
    if reference not in levels:
        notes.append(f"reference {factor} {reference!r} not in the data ({', '.join(levels)})")
        empty = pd.DataFrame()
        return ContrastResult(empty, empty, empty, empty, pd.DataFrame(), notes)
    match = ["run_id", "scenario_id", "variant_id", "target", "condition", "simulator", "replicate"]
    match = [c for c in match if c != factor]
    pooled, per_t = [], []
    enc = Encoded(cc)
    for lvl in levels:
        if lvl == reference:
            continue
        pairs = pair_arms(cc, factor, reference, lvl, match, enc)
        if pairs.empty:
            notes.append(f"no matched pairs for {factor} {reference} vs {lvl}")
            continue
        pairs = pairs.assign(
            contrast=f"{factor}: {reference} → {lvl}", baseline=reference, option=lvl
        )
        gcols = ["contrast", "baseline", "option", *CRITERION_KEYS, "risk_area"]
        pooled.append(summarise_pairs(pairs, gcols, n_boot=n_boot, seed=seed, ci=ci))
        per_t.append(
            summarise_pairs(pairs, [*gcols, "target"], n_boot=n_boot, seed=seed, ci=ci, tests=False)
        )
        # Every criterion together, per target: the headline "failure rate with vs without".
        all_crit = pairs.assign(criterion_id="(all criteria)", risk_area="(all)")
        per_t.append(
            summarise_pairs(
                all_crit, [*gcols, "target"], n_boot=n_boot, seed=seed, ci=ci, tests=False
            )
        )
    tab = _finish_family(pd.concat(pooled, ignore_index=True) if pooled else pd.DataFrame())
    pt = pd.concat(per_t, ignore_index=True) if per_t else pd.DataFrame()
    share = _target_share(pt, ["contrast", "option", *CRITERION_KEYS, "risk_area"])
    return ContrastResult(tab, pt, share, pd.DataFrame(), pd.DataFrame(), notes)


def simulator_sensitivity(
    data: pd.DataFrame,
    reference: str | None = None,
    *,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    ci: float = 0.95,
) -> ContrastResult | None:
    """When a sweep used two or more simulators: failure-rate difference per target between them."""
    cc = as_conversation_frame(data)
    sims = sorted(cc["simulator"].dropna().astype(str).unique())
    if len(sims) < 2:
        return None
    return condition_contrast(
        cc, reference or sims[0], n_boot=n_boot, seed=seed, ci=ci, factor="simulator"
    )
