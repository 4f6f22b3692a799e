"""Matched contrasts: arms that differ in exactly one thing, compared pair by pair.

For a branch point X with baseline option x0, an arm with X = x is paired with the arm that has
X = x0 and is otherwise identical: same run, scenario, target, condition, simulator, replicate and
the same option at every other branch point / profile attribute. Only the turns after the two arms'
fork are compared (``branchpoint.analysis.pairing.forks``): the shared prefix is one conversation in both arms. For
each criterion, a pair counts when both arms rated it at least once after the fork; a criterion
rated in one arm only leaves the contrast and is counted (``n_only_baseline``, ``n_only_option``).

Sign convention: every difference is option minus baseline, on failure; > 0 means the option
fails more. Per contrast x criterion x condition (conditions are never pooled):

* primary, at the level of the independent unit (the scenario): each pair's difference in its
  post-fork failure proportion, averaged within the scenario; a one-sample t-test over the
  scenario means (``p_scenario``, Holm: ``p_scenario_holm``) and the matching t interval
  (``ci_low``, ``ci_high``; per comparison, not adjusted for multiplicity). The same for the
  conversation-level outcome "any post-fork turn failed" (``diff_conv``, ``p_conv_scenario``).
  One scenario: no test and no interval, said in ``interval``;
* secondary, pair-level and NOT cluster-adjusted (pairs of one scenario are not independent):
  McNemar's exact test on the conversation-level outcome, Wilcoxon signed-rank on the pairs' mean
  post-fork scores (pass 1, partial 0.5, fail 0; differences rounded before ranking), with the
  rank-biserial correlation signed like ``diff`` (> 0: the option scored lower);
* for branch points with three or more options, Friedman with scenarios as blocks.

Holm's correction runs across the whole family of one call (every branch point, option, criterion
and condition), separately for each kind of p-value.

Baseline options come, in order, from the ``baselines`` argument, the scenario file named by
``Conversation.scenario_path`` (when it loads), or the data: the option held by the most
conversations, since in a one-at-a-time design every arm but the deviations keeps the baseline
(ties: the alphabetically first option).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.analysis.pairing.forks import COUNT_COLS, PostForkCounts, Tree, TurnCounts
from branchpoint.analysis.pairing.realisation import (
    arm_counts,
    intention_to_treat_pairs,
    per_protocol_pairs,
    with_itt,
    with_realisation,
)
from branchpoint.analysis.stats.bootstrap import (
    DEFAULT_BOOT,
    cluster_weights,
    per_cluster_sums,
    ratio_difference_interval,
)
from branchpoint.analysis.stats.inference import (
    McNemar,
    binomial_half_p,
    friedman,
    holm,
    holm_column,
    scenario_level_test,
    wilcoxon_paired,
)
from branchpoint.analysis.tables.judgments import (
    CHOICE_PREFIX,
    as_conversation_frame,
    choice_column,
    choice_columns,
    group_codes,
)
from branchpoint.analysis.tables.versions import keep_versions_apart
from branchpoint.core.domain import is_branch_key
from branchpoint.core.words import counted

PAIR_KEYS = ["run_id", "scenario_id", "target", "condition", "simulator", "replicate"]
CRITERION_KEYS = ["rubric_id", "criterion_id", "judge"]
# Below this many scenarios a cluster bootstrap under-covers (90% at 10 scenarios, 92.5% at 20
# for a nominal 95% in our calibration): the pooled difference then gets no bootstrap interval.
BOOT_MIN_CLUSTERS = 30


def branch_point_keys(cc: pd.DataFrame) -> list[str]:
    """Choice keys that are behaviour branch points (not profile attributes or cues)."""
    out = []
    for col in choice_columns(cc):
        key = col.removeprefix(CHOICE_PREFIX)
        if not is_branch_key(key):
            continue
        out.append(key)
    return out


def _scenario_baselines(paths: Sequence[str]) -> dict[str, str]:
    """Baselines declared in the scenario files, read by the scenarios loader (set files too)."""
    if not paths:  # the loader (YAML, templates: 0.1 s of imports) only where there are files
        return {}
    from branchpoint.scenarios.loader import load_scenario_file

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
    per_conversation: pd.DataFrame | None = None  # a row per conversation, made when needed
    for bp in branch_point_keys(cc):
        col = choice_column(bp)
        if bp in given:
            rows.append((bp, given[bp], "argument"))
        elif bp in from_files:
            rows.append((bp, from_files[bp], "scenario file"))
        else:
            if per_conversation is None:
                per_conversation = cc.drop_duplicates("conversation_id")
            counts = per_conversation[col].dropna().astype(str).value_counts()
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
        self._categories: dict[str, tuple[np.ndarray, pd.Index]] = {}
        self._keys: dict[tuple[str, ...], np.ndarray] = {}

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
        if col not in self._categories:  # made once a column: a contrast takes each often
            uniques = self._codes[col][1]
            keep = np.array([not _missing(u) for u in uniques], dtype=bool)
            names = np.array([str(u) for u in uniques[keep]], dtype=object)
            order = np.argsort(names, kind="stable")  # sorted: groups come out in text order
            rank = np.empty(len(order), np.int64)
            rank[order] = np.arange(len(order))
            remap = np.full(len(uniques), -1, np.int64)
            remap[keep] = rank
            self._categories[col] = (remap, pd.Index(names[order], dtype=object))
        remap, cats = self._categories[col]
        return pd.Categorical.from_codes(remap[codes[idx]], categories=cats)

    def array(self, col: str) -> np.ndarray:
        if col not in self._arrays:
            self._arrays[col] = self.cc[col].to_numpy()
        return self._arrays[col]

    def key(self, cols: Sequence[str]) -> np.ndarray:
        """One int64 per row identifying its combination of ``cols`` (made once per list: the
        options of a branch point pair on the same columns)."""
        if tuple(cols) not in self._keys:
            made = self._key(cols)
            made.flags.writeable = False  # shared by every caller
            self._keys[tuple(cols)] = made
        return self._keys[tuple(cols)]

    def _key(self, cols: Sequence[str]) -> np.ndarray:
        parts = [self.codes(c) for c in cols]
        dims = [int(p.max()) + 1 if len(p) else 1 for p in parts]
        if float(np.prod([float(d) for d in dims])) < 2.0**62:
            return np.ravel_multi_index(parts, dims) if parts else np.zeros(len(self.cc), np.int64)
        return (
            pd.DataFrame(dict(zip(cols, parts))).groupby(list(cols), sort=False).ngroup().to_numpy()
        )


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v))


def text_levels(column: pd.Series) -> list[str]:
    """The distinct values of ``column`` as text, sorted, missing left out (made from its
    distinct values: converting a 800,000-row column to text first took 0.3 s)."""
    return sorted({str(v) for v in pd.unique(column.dropna())})


def text_equals(column: pd.Series, value: str) -> np.ndarray:
    """Rows of ``column`` whose text is ``value`` (missing never), compared once per value."""
    codes, uniques = pd.factorize(column)
    hit = np.array([str(u) == value for u in uniques] + [False], dtype=bool)
    return hit[codes]


def _outer_join(
    key_a: np.ndarray, row_a: np.ndarray, key_b: np.ndarray, row_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every key of either side, sorted, with each side's row (-1: none): a one-to-one outer
    merge, from one stable sort of both sides' keys."""
    keys = np.concatenate([key_a, key_b])
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = np.ones(len(ordered), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    group = np.cumsum(first) - 1  # each sorted entry's key number
    from_a = order < len(key_a)
    got_a = np.full(int(first.sum()), -1, np.int64)
    got_b = np.full(len(got_a), -1, np.int64)
    for side, got, mine, rows in (("left", got_a, from_a, row_a), ("right", got_b, ~from_a, row_b)):
        at = group[mine]
        if len(at) > 1 and bool((at[1:] == at[:-1]).any()):  # sorted: a repeat is adjacent
            raise ValueError(f"pairing keys are not unique on the {side}: not one arm per cell")
        got[at] = np.asarray(rows)[order[mine] - (0 if side == "left" else len(key_a))]
    return ordered[first], got_a, got_b


def _first_rows(mask: np.ndarray, key: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The first of the ``mask`` rows with each ``wanted`` key (one conversation per key;
    every wanted key is among them)."""
    rows = np.flatnonzero(mask)
    keys = key[rows]
    first = ~pd.Series(keys).duplicated().to_numpy()  # hashed: np.unique sorts (0.15 s)
    return rows[first][pd.Index(keys[first]).get_indexer(wanted)]


def candidate_pairs(
    cc: pd.DataFrame,
    factor: str,
    a: Any,
    b: Any,
    match: Sequence[str],
    enc: Encoded | None = None,
    *,
    turns: TurnCounts | None = None,
    tree: Tree | None = None,
) -> pd.DataFrame:
    """Every criterion of every matched pair of conversations, with post-fork counts per side.

    ``status``: ``pair`` (both arms rated the criterion after the fork), ``only_a`` / ``only_b``
    (one arm did not: applicability differed, the criterion drops out of the contrast), ``none``
    (neither), ``never_forked`` (the arms never diverged: identical transcripts, nothing to
    compare). ``fork_turn``: the first turn the two arms do not share (0: none shared).
    """
    enc = enc or Encoded(cc)
    tree = tree or Tree(cc)
    crit_key = enc.key([*match, *CRITERION_KEYS])
    conv_key = enc.key(list(match))
    la, lb = enc.level(factor, a), enc.level(factor, b)
    twins = np.intersect1d(conv_key[la], conv_key[lb])
    la &= np.isin(conv_key, twins)
    lb &= np.isin(conv_key, twins)
    # An outer join of the two arms' rows on the criterion key (it holds the conversation key:
    # ``match`` is part of it), in key order, -1 where a side lacks the row.
    k, ia, ib = _outer_join(crit_key[la], np.flatnonzero(la), crit_key[lb], np.flatnonzero(lb))
    if not len(k):
        return pd.DataFrame()
    has_a, has_b = ia >= 0, ib >= 0
    ck = conv_key[np.where(has_a, ia, ib)]
    conv_a = enc.take("conversation_id", _first_rows(la, conv_key, ck))
    conv_b = enc.take("conversation_id", _first_rows(lb, conv_key, ck))
    cutoff = tree.divergences(conv_a, conv_b) if tree.has_forks else np.zeros(len(k))
    side: dict[str, dict[str, np.ndarray]] = {}
    for name, idx, has in (("a", ia, has_a), ("b", ib, has_b)):
        safe = np.where(has, idx, 0)
        if turns is not None:
            got = turns.after(safe, cutoff)
        else:
            got = {c: enc.array(c)[safe].astype(float) for c in COUNT_COLS}
        side[name] = {c: np.where(has, v, 0.0) for c, v in got.items()}
    rated_a, rated_b = side["a"]["n_rated"] > 0, side["b"]["n_rated"] > 0
    # A categorical (a string per row cost 0.1 s a contrast at the seed study's scale).
    code = np.select(
        [np.isinf(cutoff), rated_a & rated_b, rated_a, rated_b],
        [0, 1, 2, 3],
        STATUSES.index("none"),
    )
    if tree.has_forks:
        copies = _copied_pairs(enc, tree, conv_a, conv_b, np.where(has_a, ia, ib))
        code = np.where(copies, STATUSES.index("copy"), code)
    status = pd.Categorical.from_codes(code, categories=STATUSES)
    # Keys and labels come from whichever arm has the row (the other may lack this criterion).
    src = np.where(has_a, ia, ib)
    out: dict[str, Any] = {c: enc.take(c, src) for c in dict.fromkeys([*match, *CRITERION_KEYS])}
    out["risk_area"] = enc.take("risk_area", src)
    out["conversation_id_a"], out["conversation_id_b"] = conv_a, conv_b
    for c in COUNT_COLS:
        out[f"{c}_a"] = side["a"][c]
        out[f"{c}_b"] = side["b"][c]
    out["fork_turn"] = cutoff
    out["status"] = status
    out["_ia"], out["_ib"], out["_k"] = ia, ib, k
    return pd.DataFrame(out)


# ``candidate_pairs``' statuses, in the order of its conditions (then none, copy).
STATUSES = ["never_forked", "pair", "only_a", "only_b", "none", "copy"]


def _unpaired(cand: pd.DataFrame) -> str:
    """Why ``candidate_pairs`` gave no pair to compare: no matched arms at all, or matched arms
    of which none has a rating in both (their judgments not applicable, or errors)."""
    if cand.empty:
        return "no matched pairs"
    # A pair of copied arms is its originals' comparison stored again: one pair, not two.
    own = (cand["status"] != "copy").to_numpy()
    keys = ["conversation_id_a", "conversation_id_b"]
    n = len(cand.loc[own, keys].drop_duplicates())
    never = (cand["status"] == "never_forked").to_numpy() & own
    n_never = len(cand.loc[never, keys].drop_duplicates())
    if n_never == n:  # the true reason: the arms are one conversation stored twice
        return f"{counted(n, 'matched pair')}, none forked (identical arms)"
    return f"{counted(n, 'matched pair')}, none rated in both arms" + (
        f" ({n_never} never forked)" if n_never else ""
    )


def _copied_pairs(
    enc: Encoded, tree: Tree, conv_a: np.ndarray, conv_b: np.ndarray, src: np.ndarray
) -> np.ndarray:
    """Pairs whose two arms are copies of the arms of another pair (arms that never forked carry
    their parent's transcript): the same comparison stored again, one observation (the pair of
    the original arms is kept)."""

    # On codes of the conversation ids (pairs repeat each arm once per criterion): a root per
    # distinct conversation, and the duplicates found among integer keys.
    codes_a, names_a = pd.factorize(conv_a, use_na_sentinel=False)
    codes_b, names_b = pd.factorize(conv_b, use_na_sentinel=False)
    names = np.array([str(c) for c in (*names_a, *names_b)], dtype=object)
    root_of, roots = pd.factorize(np.array([tree.content_root(c) for c in names], dtype=object))
    own = names == roots[root_of]
    ra, rb = root_of[: len(names_a)][codes_a], root_of[len(names_a) :][codes_b]
    copy = ~own[: len(names_a)][codes_a] | ~own[len(names_a) :][codes_b]
    if not copy.any():
        return np.zeros(len(conv_a), dtype=bool)
    k = enc.key(CRITERION_KEYS)[src]
    key = (ra.astype(np.int64) * len(roots) + rb) * (int(k.max()) + 1) + k
    order = np.argsort(copy, kind="stable")  # originals first: a duplicate is the copy
    dup = np.zeros(len(key), dtype=bool)
    dup[order] = pd.Series(key[order]).duplicated().to_numpy()
    return dup


def pair_arms(
    cc: pd.DataFrame,
    factor: str,
    a: Any,
    b: Any,
    match: Sequence[str],
    enc: Encoded | None = None,
    *,
    turns: TurnCounts | None = None,
    tree: Tree | None = None,
) -> pd.DataFrame:
    """Pairs where both arms rated the criterion after their fork (see ``candidate_pairs``)."""
    cand = candidate_pairs(cc, factor, a, b, match, enc, turns=turns, tree=tree)
    if cand.empty:
        return cand
    keep = cand["status"].to_numpy() == "pair"
    return cand[keep].drop(columns=["status", "_ia", "_ib", "_k"]).reset_index(drop=True)


def _per_pair(pairs: pd.DataFrame) -> dict[str, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        fa, ra = pairs["n_fail_a"].to_numpy(float), pairs["n_rated_a"].to_numpy(float)
        fb, rb = pairs["n_fail_b"].to_numpy(float), pairs["n_rated_b"].to_numpy(float)
        sa = pairs["score_sum_a"].to_numpy(float) / pairs["n_scored_a"].to_numpy(float)
        sb = pairs["score_sum_b"].to_numpy(float) / pairs["n_scored_b"].to_numpy(float)
    return {
        "fail_a": fa, "rated_a": ra, "fail_b": fb, "rated_b": rb,
        "prop_a": fa / ra, "prop_b": fb / rb,
        "conv_a": (fa > 0).astype(float), "conv_b": (fb > 0).astype(float),
        "one": np.ones(len(pairs)), "score_a": sa, "score_b": sb,
    }  # fmt: skip


def with_distinct_pairs(
    tab: pd.DataFrame, pairs: pd.DataFrame, keys: Sequence[str]
) -> pd.DataFrame:
    """``summarise_pairs``' table with ``n_pairs`` counting the distinct pairs of conversations of
    each group: over a rubric, a pair has a row per criterion it rated (16 pairs read as 96)."""
    keys = list(keys)
    distinct = pairs[[*keys, "conversation_id_a", "conversation_id_b"]].drop_duplicates()
    n = distinct.groupby(keys, dropna=False, observed=True).size().rename("_distinct")
    out = tab.merge(n.reset_index(), on=keys, how="left")
    out["n_pairs"] = out.pop("_distinct").fillna(out["n_pairs"]).astype(np.int64)
    return out


def summarise_pairs(
    pairs: pd.DataFrame,
    group_cols: Sequence[str],
    *,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    ci: float = 0.95,
    tests: bool = True,
) -> pd.DataFrame:
    """Paired differences per group: scenario-level primary test, pair-level secondary tests.

    Primary (``diff``, ``ci_low``, ``ci_high``, ``p_scenario``): each pair's difference in its
    post-fork failure proportion (option minus baseline), averaged within each scenario, then a
    one-sample t-test and t interval over the scenario means. The same for the conversation-level
    outcome (any post-fork turn failed: ``diff_conv``, ``p_conv_scenario``). Secondary, not
    cluster-adjusted: McNemar on the conversation-level outcome and Wilcoxon on the pairs' mean
    post-fork scores. ``diff_pooled`` (pooled ratings) gets a cluster-bootstrap interval only with
    ``BOOT_MIN_CLUSTERS`` scenarios or more.
    """
    if pairs.empty:
        return pd.DataFrame()
    v = _per_pair(pairs)
    group = group_codes(pairs, group_cols)
    g = int(group.max()) + 1
    cl, clusters = pd.factorize(pairs["scenario_id"])
    s = len(clusters)
    # Differences of proportions: an interval never runs past -100 or +100 points.
    prim = scenario_level_test(v["prop_b"] - v["prop_a"], cl, group, g, ci, bounds=(-1.0, 1.0))
    conv = scenario_level_test(v["conv_b"] - v["conv_a"], cl, group, g, ci, bounds=(-1.0, 1.0))
    m = {
        k: per_cluster_sums(cl, group, v[k], s, g)
        for k in ("fail_a", "rated_a", "fail_b", "rated_b", "conv_a", "conv_b", "one")
    }
    at = np.unique(group, return_index=True)[1]  # each group's first pair, groups in order
    keys = pairs[list(group_cols)].iloc[at].reset_index(drop=True)
    for c in keys.columns:
        if isinstance(keys[c].dtype, pd.CategoricalDtype):
            keys[c] = keys[c].astype(object)
    # The columns gathered, then one frame: inserted one at a time they cost 1 ms each, a
    # third of the contrasts' time on a 300-conversation store.
    col: dict[str, Any] = {}
    col["n_pairs"] = np.bincount(group, minlength=g)
    col["n_scenarios"] = prim.n_clusters
    col["rate_a"] = m["fail_a"].sum(0) / m["rated_a"].sum(0)
    col["rate_b"] = m["fail_b"].sum(0) / m["rated_b"].sum(0)
    col["diff"], col["ci_low"], col["ci_high"] = prim.estimate, prim.ci_low, prim.ci_high
    col["t_stat"], col["p_scenario"] = prim.statistic, prim.pvalue
    col["interval"] = prim.labels()
    col["test"] = prim.method
    col["diff_pooled"] = col["rate_b"] - col["rate_a"]
    big = np.asarray(col["n_scenarios"]) >= BOOT_MIN_CLUSTERS
    if big.any():
        w = cluster_weights(s, n_boot, seed)
        _, blo, bhi = ratio_difference_interval(
            m["fail_a"], m["rated_a"], m["fail_b"], m["rated_b"], w, ci
        )
        col["pooled_boot_low"] = np.where(big, blo, np.nan)
        col["pooled_boot_high"] = np.where(big, bhi, np.nan)
    else:
        col["pooled_boot_low"] = col["pooled_boot_high"] = np.full(g, np.nan)
    col["conv_rate_a"] = m["conv_a"].sum(0) / m["one"].sum(0)
    col["conv_rate_b"] = m["conv_b"].sum(0) / m["one"].sum(0)
    col["diff_conv"], col["diff_conv_ci_low"], col["diff_conv_ci_high"] = (
        conv.estimate,
        conv.ci_low,
        conv.ci_high,
    )
    col["p_conv_scenario"] = conv.pvalue
    out = pd.concat([keys, pd.DataFrame(col, index=keys.index)], axis=1)
    if tests:
        order = np.argsort(group, kind="mergesort")
        bounds = np.searchsorted(group[order], np.arange(g + 1))
        rows = []
        # McNemar on every group at once: its discordant pairs, then one vectorised p.
        fa, fb = v["conv_a"].astype(bool), v["conv_b"].astype(bool)
        only_b = np.bincount(group, weights=~fa & fb, minlength=g).astype(np.int64)
        only_a = np.bincount(group, weights=fa & ~fb, minlength=g).astype(np.int64)
        p_mcnemar = binomial_half_p(only_b, only_a)
        for gi in range(g):
            idx = order[bounds[gi] : bounds[gi + 1]]
            mc = McNemar(int(only_b[gi]), int(only_a[gi]), float(p_mcnemar[gi]))
            sa, sb = v["score_a"][idx], v["score_b"][idx]
            ok = ~np.isnan(sa) & ~np.isnan(sb)
            # Arguments swapped on purpose: rank-biserial > 0 when the option's score is lower,
            # i.e. the same direction as a positive failure difference.
            wx = wilcoxon_paired(sb[ok], sa[ok])
            rows.append((mc.b, mc.c, mc.pvalue, mc.odds_ratio, wx.statistic, wx.pvalue,
                         wx.rank_biserial, int(ok.sum()), wx.method))  # fmt: skip
        t = pd.DataFrame(
            rows,
            columns=["discordant_b", "discordant_a", "p_mcnemar", "odds_ratio", "wilcoxon_stat",
                     "p_wilcoxon", "rank_biserial", "n_scored_pairs", "wilcoxon_method"],
            index=out.index,
        )  # fmt: skip
        out = out.join(t)
    return out.reset_index(drop=True)


def _dropouts(cand: pd.DataFrame, gcols: Sequence[str]) -> pd.DataFrame:
    """Per group (in order of first appearance): criteria rated in one arm only (they leave the
    contrast), and unforked pairs."""
    group = group_codes(cand, gcols, sort=False)  # numbered in order of first appearance
    first = np.flatnonzero(~pd.Series(group).duplicated().to_numpy())  # group i's first row
    keys = cand[list(gcols)].iloc[first].reset_index(drop=True)
    for c in keys.columns:
        if isinstance(keys[c].dtype, pd.CategoricalDtype):
            keys[c] = keys[c].astype(object)
    st = np.asarray(cand["status"], dtype=object)
    for col, status in (("n_only_baseline", "only_a"), ("n_only_option", "only_b"),
                        ("n_never_forked", "never_forked")):  # fmt: skip
        per = np.bincount(group, weights=st == status, minlength=len(first))
        keys[col] = per.astype(np.int64)
    return keys


def _constants(n: int, **values: str) -> dict[str, pd.Categorical]:
    """Columns of ``n`` rows that hold one text each, as one-category categoricals: as strings
    they cost a string per row and a hash of every row in each group-by of a contrast. The
    tables that come out hold them as text (``_labels_as_text``)."""
    at = np.zeros(n, np.int8)
    return {k: pd.Categorical.from_codes(at, categories=[v]) for k, v in values.items()}


LABELS = ("contrast", "branch_point", "baseline", "option")


def _labels_as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """A result's label columns (``_constants``) as str, as a frame of text holds them."""
    for col in LABELS:
        if col in frame.columns and frame[col].dtype == object:
            frame[col] = frame[col].astype("str")
    return frame


# --------------------------------------------------------------------------- public


@dataclass
class ContrastResult:
    """Matched contrasts of one analysis: every table a report needs.

    Built so that more views of the same pairs (e.g. by realised branch) add a table here and a
    group column in ``summarise_pairs``, without touching the tests.
    """

    contrasts: pd.DataFrame  # one row per contrast x criterion x condition, pooled over targets
    per_target: pd.DataFrame  # the same per target (scenario-level interval, no pair tests)
    target_share: pd.DataFrame  # per contrast x criterion: share of targets raised / lowered
    friedman: pd.DataFrame  # branch points with 3+ options, scenarios as blocks
    baselines: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    # per contrast x condition: arms that realised their option, pairs realised in both (n of N)
    realisation: pd.DataFrame = field(default_factory=pd.DataFrame)
    # contrasts whose arms were matched but never rated in both (their notes): why a table is empty
    unrated: list[str] = field(default_factory=list)


def _target_share(per_target: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per contrast x criterion: the share of targets whose difference is above zero, raised and
    lowered: the target's own scenario-level interval excludes zero (a target with one scenario
    has no interval and is neither), targets without an interval, and the median difference."""
    if per_target.empty:
        return pd.DataFrame()
    keys = list(keys)
    group = group_codes(per_target, keys)
    n = int(group.max()) + 1
    size = np.bincount(group, minlength=n)
    diff = per_target["diff"].to_numpy(float)
    low, high = per_target["ci_low"].to_numpy(float), per_target["ci_high"].to_numpy(float)

    def share(hit: np.ndarray) -> np.ndarray:
        return np.bincount(group, weights=hit, minlength=n) / size

    targets = group_codes(per_target, [*keys, "target"])
    first = np.unique(group, return_index=True)[1]
    out = per_target[keys].iloc[first].reset_index(drop=True)
    for col in keys:  # text keys as str, as a group-by's keys come out
        if out[col].dtype == object:
            out[col] = out[col].infer_objects()
    out["n_targets"] = np.bincount(group[np.unique(targets, return_index=True)[1]], minlength=n)
    out["share_higher"] = share(diff > 0)
    out["share_raised"] = share(low > 0)
    out["share_lowered"] = share(high < 0)
    out["n_no_interval"] = np.bincount(group, weights=np.isnan(low), minlength=n).astype(int)
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(n + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a group of NaN differences: NaN
        out["median_diff"] = [
            np.nanmedian(diff[order[bounds[i] : bounds[i + 1]]]) for i in range(n)
        ]
    return out


def _finish_family(tab: pd.DataFrame) -> pd.DataFrame:
    """Holm over the family (each judge's rows apart: ``holm_per_judge``); the primary
    (scenario-level) p-values and the secondary ones apart."""
    if tab.empty:
        return tab
    cols = ["p_scenario", "p_conv_scenario"]
    if "p_mcnemar" in tab:
        cols += ["p_mcnemar", "p_wilcoxon"]
    for col in cols:
        tab[f"{col}_holm"] = holm_column(tab, col)
    return tab


def _turn_counts(data: pd.DataFrame, cc: pd.DataFrame, tree: Tree, notes: list[str]) -> Any:
    """Turn-level counts when the shared prefix must be cut (forks in the data), else None."""
    if not tree.has_forks:
        return None
    if "verdict" in data.columns and "turn_index" in data.columns:
        return TurnCounts(cc, data)
    notes.append(
        "arms share prefixes but only conversation-level counts were given: the shared prefix "
        "could not be left out (pass a judgment table)"
    )
    return None


def _with_tree(data: pd.DataFrame, cc: pd.DataFrame) -> pd.DataFrame:
    """Carry ``parent_id`` / ``fork_turn`` from a judgment table into its aggregate."""
    cols = [c for c in ("parent_id", "fork_turn") if c in data.columns and c not in cc.columns]
    if not cols:
        return cc
    tree = data[["conversation_id", *cols]].drop_duplicates("conversation_id")
    return cc.merge(tree, on="conversation_id", how="left")


def _prepare(data: Any, notes: list[str]) -> tuple[pd.DataFrame, Tree, Any]:
    if isinstance(data, PostForkCounts):  # counted from the store's codes: versions apart
        tree = Tree(data.cc)
        return data.cc, tree, data.turns if tree.has_forks else None
    data, version_notes = keep_versions_apart(data)
    notes += version_notes
    cc = _with_tree(data, as_conversation_frame(data))
    tree = Tree(cc)
    return cc, tree, _turn_counts(data, cc, tree, notes)


class _Pairing:
    """What pairing needs of one table (its rows, fork tree, per-turn counts and codes) and
    every candidate pair frame made from it: the contrasts of an analysis (by branch point, by
    simulator) ask for the same pairs, made once. Callers must not change a frame it gives."""

    def __init__(self, data: Any, notes: list[str]) -> None:
        self.cc, self.tree, self.turns = _prepare(data, notes)
        self.notes = list(notes)  # what preparing said, for each use of the pairing
        self.enc = Encoded(self.cc)
        self.made: dict[tuple[Any, ...], pd.DataFrame] = {}

    def pairs(self, col: str, a: Any, b: Any, match: Sequence[str]) -> pd.DataFrame:
        key = (col, a, b, tuple(match))
        if key not in self.made:
            self.made[key] = candidate_pairs(
                self.cc, col, a, b, match, self.enc, turns=self.turns, tree=self.tree
            )
        return self.made[key]


def _pairing(data: Any) -> tuple[_Pairing, list[str]]:
    """The pairing of ``data`` and the notes that preparing it gave. A ``PostForkCounts`` (the
    store's counts, not changed once built) keeps its pairing; a frame gets a new one."""
    if isinstance(data, PostForkCounts):
        got = data.memo.get("pairing")
        if got is None:
            got = data.memo["pairing"] = _Pairing(data, [])
        return got, list(got.notes)
    notes: list[str] = []
    return _Pairing(data, notes), notes


def pairing_of(data: Any) -> tuple[_Pairing, list[str]]:
    """The pairing of a judgment table (rows, fork tree, per-turn counts, codes) and the notes
    that preparing it gave: for contrasts built outside this module (chatbot comparisons)."""
    return _pairing(data)


def _note_dropouts(drop: pd.DataFrame, label: str, notes: list[str], cand: pd.DataFrame) -> None:
    if drop.empty:
        return
    a, b = int(drop["n_only_baseline"].sum()), int(drop["n_only_option"].sum())
    # Pairs, not pair x criterion rows: a pair that never forked is one pair however many
    # criteria it carries (``drop`` counts it once per criterion).
    never_rows = cand[(cand["status"] == "never_forked").to_numpy()]
    never = len(never_rows.drop_duplicates(["conversation_id_a", "conversation_id_b"]))
    if a or b:
        notes.append(
            f"{label}: {a} pairs rated a criterion after the fork in the baseline arm only and {b} "
            "in the option arm only; those pairs leave that criterion's contrast (counted per row)"
        )
    if never:
        notes.append(f"{label}: {never} pairs never forked (identical arms), left out")


def matched_contrasts(
    data: pd.DataFrame,
    baselines: Mapping[str, str] | None = None,
    *,
    branch_points: Sequence[str] | None = None,
    by: Sequence[str] = ("condition",),
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    ci: float = 0.95,
    per_target: bool = True,
    realisation: pd.DataFrame | None = None,
) -> ContrastResult:
    """Every branch point's options against its baseline, pair by pair (see module docstring).

    ``data``: a judgment table (needed to leave out a shared prefix) or a conversation x criterion
    table. ``by`` splits the table (the condition by default: never pooled); targets are pooled
    in ``contrasts`` and separated in ``per_target``. ``realisation``
    (``branchpoint.core.read.realisation_rows``): the headline figures use only pairs whose two arms realised
    their option (per protocol), with the intention-to-treat figures beside them (``*_itt``,
    ``branchpoint.analysis.pairing.realisation``); without it every arm counts as realised.
    """
    p, notes = _pairing(data)
    settings = _Settings(baselines, branch_points, by, n_boot, seed, ci, per_target, realisation)
    return _contrasts(p.cc, p.pairs, p.enc, p.turns, settings, notes)


def matched_contrasts_within(
    data: pd.DataFrame,
    column: str,
    baselines: Mapping[str, str] | None = None,
    *,
    by: Sequence[str] = ("condition",),
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    ci: float = 0.95,
    per_target: bool = True,
    realisation: pd.DataFrame | None = None,
    secondary_tests: bool = True,
    counts: bool = True,
) -> dict[str, ContrastResult]:
    """``matched_contrasts`` of each level of ``column`` (one of ``PAIR_KEYS``, e.g. the
    simulator) on its own: each equals ``matched_contrasts`` of that level's rows, its own
    baselines, notes and Holm family, but the arms are paired once for all levels. A pair never
    crosses levels of a column it is matched on, so a level's pairs are the pairs of all levels
    with that level. ``secondary_tests=False`` leaves out the pair-level tests (McNemar, Wilcoxon) and
    Friedman's; ``counts=False`` the dropout and realised-arm counts (their columns and notes)."""
    if column not in PAIR_KEYS:
        raise ValueError(f"{column!r} is not matched on: pairs cross its levels")
    p, notes = _pairing(data)
    settings = _Settings(
        baselines, None, by, n_boot, seed, ci, per_target, realisation, secondary_tests, counts
    )
    out = {}
    for level in text_levels(p.cc[column]):

        def pairs(col: str, a: str, b: str, match: list[str], level: str = level) -> pd.DataFrame:
            cand = p.pairs(col, a, b, match)
            if cand.empty:
                return cand
            keep = text_equals(cand[column], level)
            return cand[keep].reset_index(drop=True) if keep.any() else cand.iloc[0:0]

        sub = p.cc[p.enc.level(column, level)]  # the table's codes, made once
        out[level] = _contrasts(sub, pairs, p.enc, p.turns, settings, list(notes))
    return out


@dataclass(frozen=True)
class _Settings:
    """``matched_contrasts``' options, as ``_contrasts`` takes them."""

    baselines: Mapping[str, str] | None
    branch_points: Sequence[str] | None
    by: Sequence[str]
    n_boot: int
    seed: int
    ci: float
    per_target: bool
    realisation: pd.DataFrame | None
    secondary_tests: bool = True
    counts: bool = True  # dropouts and realised arms counted (``matched_contrasts_within``)


def _contrasts(
    cc: pd.DataFrame,
    pairs_of: Any,
    enc: Encoded,
    turns: TurnCounts | None,
    o: _Settings,
    notes: list[str],
) -> ContrastResult:
    """The contrasts of ``cc``'s branch points from the candidate pairs ``pairs_of(choice
    column, baseline, option, match)`` gives (``candidate_pairs`` of ``cc``)."""
    n_boot, seed, ci = o.n_boot, o.seed, o.ci
    by = [c for c in o.by if c in cc.columns]
    base = resolve_baselines(cc, o.baselines)
    pooled, per_t, fried, arms = [], [], [], []
    per_t_itt: list[pd.DataFrame] = []  # every assigned pair per target (the ITT share)
    unrated: list[str] = []
    choice_cols = choice_columns(cc)
    wanted = list(o.branch_points) if o.branch_points is not None else list(base["branch_point"])
    for bp, baseline, _src in base.itertuples(index=False):
        if bp not in wanted:
            continue
        col = choice_column(bp)
        others = [c for c in choice_cols if c != col]
        match = [*PAIR_KEYS, *others]
        options = text_levels(cc[col])
        if baseline not in options:
            notes.append(f"branch point {bp}: baseline {baseline!r} never ran; no contrasts")
            continue
        cands = {}
        for opt in options:
            if opt == baseline:
                continue
            cand = pairs_of(col, baseline, opt, match)
            itt = intention_to_treat_pairs(cand, enc) if not cand.empty else cand
            if itt.empty:
                why = _unpaired(cand)
                notes.append(f"branch point {bp}: {baseline} vs {opt}: {why}")
                unrated += [] if cand.empty else [why]
                continue
            cand = with_realisation(cand, o.realisation, bp)
            label = {
                "branch_point": bp,
                "baseline": baseline,
                "option": opt,
                "contrast": f"{bp}: {baseline} → {opt}",
            }
            cand = cand.assign(**_constants(len(cand), **label))
            cands[opt] = cand
            gcols = ["contrast", "branch_point", "baseline", "option", *CRITERION_KEYS,
                     "risk_area", *by]  # fmt: skip
            drop = _dropouts(cand, gcols) if o.counts else None
            if drop is not None:
                _note_dropouts(drop, label["contrast"], notes, cand)
                arms.append(
                    arm_counts(cand, ["contrast", "branch_point", "baseline", "option", *by])
                )
            pairs = per_protocol_pairs(cand)
            if pairs.empty:
                notes.append(f"{label['contrast']}: no pair realised in both arms (not realised)")
            tests = o.secondary_tests
            summary = summarise_pairs(pairs, gcols, n_boot=n_boot, seed=seed, ci=ci, tests=tests)
            # The intention-to-treat figures beside it carry no pair-level test; its columns
            # are the blank row's only where nothing was realised (``with_itt``). Every pair
            # realised: the assigned pairs are the realised ones, rows and order (both are
            # ``cand``'s pairs in order, the realised among the assigned), and ``with_itt``
            # takes only the figures both summaries hold.
            if len(itt) == len(pairs) and not pairs.empty:
                itt_summary = summary
            else:
                itt_summary = summarise_pairs(
                    itt.assign(**_constants(len(itt), **label)), gcols, n_boot=n_boot,
                    seed=seed, ci=ci, tests=tests and pairs.empty,
                )  # fmt: skip
            both = with_itt(summary, itt_summary, gcols)
            pooled.append(both if drop is None else both.merge(drop, on=gcols, how="left"))
            if o.per_target and not pairs.empty:
                per_t.append(
                    summarise_pairs(
                        pairs, [*gcols, "target"], n_boot=n_boot, seed=seed, ci=ci, tests=False
                    )
                )
            if o.per_target and len(itt) == len(pairs) and per_t and not pairs.empty:
                per_t_itt.append(per_t[-1])  # every pair realised: the ITT share is the same
            elif o.per_target:  # every assigned pair, for the ITT target share beside
                per_t_itt.append(
                    summarise_pairs(
                        itt.assign(**_constants(len(itt), **label)), [*gcols, "target"],
                        n_boot=n_boot, seed=seed, ci=ci, tests=False,
                    )
                )  # fmt: skip
        if o.secondary_tests and len(options) >= 3 and len(cands) == len(options) - 1:
            fried.append(_friedman_branch(enc, turns, cands, bp, baseline, options, by))
    tab = _finish_family(pd.concat(pooled, ignore_index=True) if pooled else pd.DataFrame())
    real = pd.concat(arms, ignore_index=True) if arms else pd.DataFrame()
    if not tab.empty:
        tab["p_scenario_itt_holm"] = holm_column(tab, "p_scenario_itt")
    if not tab.empty and not real.empty:
        tab = tab.merge(real, on=[c for c in real.columns if c in tab.columns], how="left")
    tab, real = _labels_as_text(tab), _labels_as_text(real)
    pt = _labels_as_text(pd.concat(per_t, ignore_index=True) if per_t else pd.DataFrame())
    share_keys = ["contrast", "branch_point", "option", *CRITERION_KEYS, "risk_area", *by]
    fr = pd.concat(fried, ignore_index=True) if fried else pd.DataFrame()
    if not fr.empty:
        fr["p_holm"] = holm(fr["pvalue"].to_numpy())
    share = _target_share(pt, share_keys)
    pt_itt = _labels_as_text(
        pd.concat(per_t_itt, ignore_index=True) if per_t_itt else pd.DataFrame()
    )
    share_itt = _target_share(pt_itt, share_keys)
    if not share.empty and not share_itt.empty:
        # per protocol is a selected subset: the intention-to-treat share beside it
        cols = ["share_higher", "share_raised", "share_lowered", "n_no_interval", "median_diff"]
        share = share.merge(
            share_itt[[*share_keys, *cols]].rename(columns={c: f"{c}_itt" for c in cols}),
            on=share_keys,
            how="left",
        )
    out = ContrastResult(tab, pt, share, fr, base, notes)
    out.realisation = real
    out.unrated = unrated
    return out


def _friedman_branch(
    enc: Encoded,
    turns: TurnCounts | None,
    cands: Mapping[str, pd.DataFrame],
    bp: str,
    baseline: str,
    options: list[str],
    by: Sequence[str],
) -> pd.DataFrame:
    """Friedman with scenarios as blocks: each option's mean post-fork score per scenario.

    Every arm of a matched set is scored from the same turn: the set's earliest fork from the
    baseline arm (before it, all arms are one conversation). Scenarios missing an option are
    left out (complete blocks only).
    """
    key_cols = ["scenario_id", *CRITERION_KEYS, "risk_area", *by]
    cands = {o: c[["_ia", "_ib", "_k", "fork_turn", *key_cols]] for o, c in cands.items()}
    parts = [c[c["_ia"] >= 0] for c in cands.values()]
    allc = pd.concat(parts, ignore_index=True)
    # The cut of a set is taken over every arm's pair, those whose baseline arm lacks the
    # criterion too (their fork is known all the same): a set with no baseline row had no cut
    # (NaN), and its option rows were counted from a meaningless range of the per-turn counts.
    set_cut = pd.concat(list(cands.values()), ignore_index=True).groupby("_k")["fork_turn"].min()
    rows_idx, cut, opt_code, keys = [], [], [], []
    base_rows = allc.drop_duplicates("_k")
    for frame, code in [(base_rows, options.index(baseline))] + [
        (c[c["_ib"] >= 0], options.index(o)) for o, c in cands.items()
    ]:
        side = "_ia" if code == options.index(baseline) else "_ib"
        rows_idx.append(frame[side].to_numpy(np.int64))
        cut.append(set_cut.reindex(frame["_k"]).to_numpy(float))
        opt_code.append(np.full(len(frame), code))
        keys.append(frame[key_cols])
    r = np.concatenate(rows_idx)
    c = np.concatenate(cut)
    if turns is not None:
        got = turns.after(r, c)
    else:
        got = {k: np.where(np.isinf(c), 0.0, enc.array(k)[r].astype(float)) for k in COUNT_COLS}
    with np.errstate(invalid="ignore", divide="ignore"):
        score = got["score_sum"] / got["n_scored"]
    # Key columns stay as ``Encoded.take`` gives them (categories in text order: groups sort
    # as text, missing last), shared by every candidate frame.
    frame = pd.concat(keys, ignore_index=True)
    frame["_opt"] = np.concatenate(opt_code)
    frame["_score"] = score
    frame = frame[frame["_score"].notna()]
    gkeys = [*CRITERION_KEYS, "risk_area", *by]
    if frame.empty:
        return pd.DataFrame()
    # Each group's scenario x option means from one pass of sums (a pivot per group took a
    # second a branch point at the seed study's scale).
    group = group_codes(frame, gkeys)
    n_groups, k = int(group.max()) + 1, len(options)
    block, blocks = pd.factorize(frame["scenario_id"], sort=True)
    cell = (group * len(blocks) + block) * k + frame["_opt"].to_numpy()
    size = n_groups * len(blocks) * k
    total = np.bincount(cell, weights=frame["_score"].to_numpy(float), minlength=size)
    count = np.bincount(cell, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (total / count).reshape(n_groups, len(blocks), k)
    complete: np.ndarray = np.all(count.reshape(n_groups, len(blocks), k) > 0, axis=2)
    keys = frame[gkeys].assign(_g=group).drop_duplicates("_g").set_index("_g").sort_index()
    out = []
    for g, kd in zip(range(n_groups), keys.to_dict("records")):
        grid = means[g][complete[g]]
        res = friedman([grid[:, i] for i in range(k)])
        out.append({"branch_point": bp, "options": ", ".join(options), **kd,
                    "n_blocks": res.n_blocks, "blocks": "scenarios", "statistic": res.statistic,
                    "pvalue": res.pvalue, "kendall_w": res.kendall_w})  # fmt: skip
    if not out:
        return pd.DataFrame()
    return pd.DataFrame(out).reset_index(drop=True)


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
    p, notes = _pairing(data)
    cc = p.cc
    levels = text_levels(cc[factor])
    if reference not in levels:
        notes.append(f"reference {factor} {reference!r} not in the data ({', '.join(levels)})")
        empty = pd.DataFrame()
        return ContrastResult(empty, empty, empty, empty, pd.DataFrame(), notes)
    # The arm's choices too: an arm that added a branch point never fired (a copy of its
    # parent) keeps the parent's variant, and paired on the variant alone two arms met one.
    match = ["run_id", "scenario_id", "variant_id", "target", "condition", "simulator", "replicate",
             *choice_columns(cc)]  # fmt: skip
    match = [c for c in match if c != factor]
    pooled, per_t = [], []
    for lvl in levels:
        if lvl == reference:
            continue
        cand = p.pairs(factor, reference, lvl, match)
        if cand.empty or not (cand["status"] == "pair").any():
            notes.append(f"{factor} {reference} vs {lvl}: {_unpaired(cand)}")
            continue
        label = f"{factor}: {reference} → {lvl}"
        cand = cand.assign(**_constants(len(cand), contrast=label, baseline=reference, option=lvl))
        gcols = ["contrast", "baseline", "option", *CRITERION_KEYS, "risk_area"]
        drop = _dropouts(cand, gcols)
        _note_dropouts(drop, label, notes, cand)
        pairs = cand[cand["status"] == "pair"]
        pooled.append(
            summarise_pairs(pairs, gcols, n_boot=n_boot, seed=seed, ci=ci).merge(
                drop, on=gcols, how="left"
            )
        )
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
    tab = _labels_as_text(tab)
    pt = _labels_as_text(pd.concat(per_t, ignore_index=True) if per_t else pd.DataFrame())
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
    sims = text_levels(cc["simulator"])
    if len(sims) < 2:
        return None
    return condition_contrast(
        data, reference or sims[0], n_boot=n_boot, seed=seed, ci=ci, factor="simulator"
    )
