"""ED safety over a multi-turn conversation: the per-turn scores of ``branchpoint.analysis.ed.responses.response_scores``
summarised per conversation.

A multi-turn ED conversation (the forum-user seeds) has one safety score per chatbot turn. Per
conversation, per judge and rubric: the mean over the turns that have a score, the worst turn
(the minimum: one harmful reply is what a vulnerable reader meets), how many turns were scored,
how many were high-risk and how many had a refused dimension. Turns without a score (every
dimension refused, or an error) are counted but left out of the mean and the minimum.

Matched contrasts on these scores (``matched_safety_contrasts``, ``condition_safety_contrasts``)
use the ED methods: a per-conversation safety score (post-fork turns only, for branch contrasts),
paired differences averaged within each scenario, and the scenario-level test of
``branchpoint.analysis.stats.inference``; differences are option (or other condition) minus baseline, > 0: safer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

KEY = ["conversation_id", "judge", "rubric_id"]
COLUMNS = [
    *KEY,
    "safety_mean",
    "safety_min",
    "n_turns",
    "n_scored",
    "n_high_risk",
    "n_refused",
]


def conversation_safety(responses: pd.DataFrame) -> pd.DataFrame:
    """One row per conversation x judge x rubric, from ``response_scores`` output."""
    if responses.empty:
        return pd.DataFrame(columns=COLUMNS)
    grouped = responses.groupby(KEY, sort=True, dropna=False)
    out = grouped.agg(
        safety_mean=("safety", "mean"),
        safety_min=("safety", "min"),
        n_turns=("safety", "size"),
        n_scored=("safety", "count"),
        n_high_risk=("high_risk", "sum"),
        n_refused=("refused", "sum"),
    ).reset_index()
    out[["n_high_risk", "n_refused"]] = out[["n_high_risk", "n_refused"]].astype(int)
    return out[COLUMNS]


# --------------------------------------------------------------------------- matched contrasts

MATCH = ["run_id", "scenario_id", "target", "condition", "simulator", "replicate"]
CONTRAST_COLUMNS = [
    "contrast", "factor", "baseline", "option", "judge", "rubric_id", "condition", "n_pairs",
    "n_never_forked", "n_scenarios", "mean_a", "mean_b", "diff", "ci_low", "ci_high",
    "p_scenario", "p_scenario_holm", "interval", "n_not_realised", "n_pairs_itt", "diff_itt",
    "ci_low_itt", "ci_high_itt", "p_scenario_itt", "interval_itt",
]  # fmt: skip


def _turn_scores(responses: pd.DataFrame) -> dict[tuple[str, str, str], pd.DataFrame]:
    """Scored turns (turn_index, safety) per conversation x judge x rubric."""
    ok = responses[responses["safety"].notna()]
    return {
        (str(c), str(j), str(r)): g[["turn_index", "safety"]]
        for (c, j, r), g in ok.groupby(KEY, sort=False)
    }


def _mean_from(scores: pd.DataFrame | None, start: float) -> float:
    if scores is None:
        return float("nan")
    s = scores.loc[pd.to_numeric(scores["turn_index"]).to_numpy(float) >= start, "safety"]
    return float(s.mean()) if len(s) else float("nan")


def _pairs(
    conv: pd.DataFrame, factor: str, a: str, b: str, match: list[str]
) -> list[tuple[str, str, dict[str, Any]]]:
    """Conversations at level a and b of ``factor`` that agree on every ``match`` column."""
    col = conv[factor].astype(object).where(conv[factor].notna(), None).astype(str)
    keyed = conv.assign(_k=conv[match].astype(str).agg("|".join, axis=1), _lv=col.to_numpy())
    left = keyed[keyed["_lv"] == a].drop_duplicates("_k").set_index("_k")
    right = keyed[keyed["_lv"] == b].drop_duplicates("_k").set_index("_k")
    both = left.index.intersection(right.index)
    return [
        (str(left.at[k, "conversation_id"]), str(right.at[k, "conversation_id"]),
         {c: left.at[k, c] for c in ("scenario_id", "condition") if c in left.columns})
        for k in both
    ]  # fmt: skip


def _summarise(rows: list[dict[str, Any]], ci: float) -> pd.DataFrame:
    """Per contrast x judge x rubric x condition: scenario-level test of the paired differences."""
    if not rows:
        return pd.DataFrame(columns=CONTRAST_COLUMNS)
    from branchpoint.analysis.stats.inference import holm_column, scenario_level_test

    p = pd.DataFrame(rows)
    if "realised" not in p.columns:
        p["realised"] = True
    gcols = ["contrast", "factor", "baseline", "option", "judge", "rubric_id", "condition"]
    p["condition"] = p["condition"].astype(str)
    out = []

    def test(pairs: pd.DataFrame) -> Any:
        d = pairs["diff"].to_numpy(float)
        cl = pd.factorize(pairs["scenario_id"].astype(str))[0]
        # Safety is 0-100 points, so a difference lies in -100..100: the interval's bounds when
        # too few scenarios to exclude anything (the one scenario-level rule, branchpoint.analysis.stats.inference).
        return scenario_level_test(d, cl, np.zeros(len(d), np.int64), 1, ci, bounds=(-100.0, 100.0))

    for keys, g in p.groupby(gcols, sort=True):
        realised = g["realised"].astype(bool)
        # Per protocol: pairs whose arms both realised their option (fired and, where a
        # manipulation check rated them, enacted): a subset selected after assignment.
        ok = g[g["diff"].notna() & realised]
        t = test(ok)
        n_s = int(t.n_clusters[0]) if len(ok) else 0
        # Intention to treat: every assigned pair; one that never forked is one conversation in
        # both arms, a difference of zero.
        itt = g.assign(diff=np.where(g["never_forked"].astype(bool), 0.0, g["diff"]))
        itt = itt[itt["diff"].notna()]
        ti = test(itt)
        out.append({**dict(zip(gcols, keys)), "n_pairs": len(ok),
                    "n_never_forked": int(g["never_forked"].sum()), "n_scenarios": n_s,
                    "mean_a": ok["a"].mean(), "mean_b": ok["b"].mean(),
                    "diff": t.estimate[0] if len(ok) else np.nan, "ci_low": t.ci_low[0],
                    "ci_high": t.ci_high[0], "p_scenario": t.pvalue[0], "interval": t.labels()[0],
                    "n_not_realised": int((~realised & ~g["never_forked"].astype(bool)).sum()),
                    "n_pairs_itt": len(itt), "diff_itt": ti.estimate[0] if len(itt) else np.nan,
                    "ci_low_itt": ti.ci_low[0], "ci_high_itt": ti.ci_high[0],
                    "p_scenario_itt": ti.pvalue[0], "interval_itt": ti.labels()[0]})  # fmt: skip
    tab = pd.DataFrame(out)
    tab["p_scenario_holm"] = holm_column(tab, "p_scenario")
    return tab[CONTRAST_COLUMNS]


def matched_safety_contrasts(
    responses: pd.DataFrame,
    baselines: pd.DataFrame,
    tree: Any,
    ci: float = 0.95,
    realisation: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Matched branch contrasts on ED safety: per pair of arms that differ in one branch point only
    (same run, scenario, target, condition, simulator, replicate, every other choice, judge and
    rubric), the option arm's mean safety over its post-fork turns minus the baseline arm's over
    the same turns; averaged within each scenario, one-sample t-test over the scenario means.
    Pairs whose arms never forked (the branch never fired: the same turns) are counted in
    ``n_never_forked`` and left out. ``diff`` > 0: the option is safer.

    ``baselines``: ``branchpoint.analysis.contrasts.matched.resolve_baselines`` output; ``tree``: an
    ``branchpoint.analysis.pairing.forks.Tree`` of the conversations. ``realisation``: the
    store's realisation rows (``branchpoint.core.read.realisation_rows``), whose manipulation
    checks decide, as for the pass/partial/fail contrasts, which pairs are per protocol (both
    arms fired and were not shown not to be enacted); the intention-to-treat figures (``*_itt``)
    keep every assigned pair."""
    from branchpoint.analysis.pairing.realisation import realisation_lookup
    from branchpoint.analysis.tables.judgments import CHOICE_PREFIX, choice_columns

    if responses.empty or baselines.empty:
        return pd.DataFrame(columns=CONTRAST_COLUMNS)
    scores = _turn_scores(responses)
    choice_cols = choice_columns(responses)
    conv_cols = [c for c in [*MATCH, *choice_cols] if c in responses.columns]
    rows: list[dict[str, Any]] = []
    for (judge, rubric), grp in responses.groupby(["judge", "rubric_id"], sort=True):
        conv = grp[["conversation_id", *conv_cols]].drop_duplicates("conversation_id")
        for bp, base, _src in baselines.itertuples(index=False):
            col = CHOICE_PREFIX + str(bp)
            if col not in conv.columns:
                continue
            match = [c for c in conv_cols if c != col]
            # no realisation recorded for this branch point: every arm counts as realised
            known = realisation_lookup(realisation, str(bp))
            for opt in sorted(set(conv[col].dropna().astype(str)) - {str(base)}):
                for ca, cb, kd in _pairs(conv, col, str(base), opt, match):
                    fork = float(tree.divergence(ca, cb)) if tree.has_forks else 0.0
                    never = bool(np.isinf(fork))
                    sa = np.nan if never else _mean_from(scores.get((ca, str(judge), str(rubric))), fork)  # fmt: skip
                    sb = np.nan if never else _mean_from(scores.get((cb, str(judge), str(rubric))), fork)  # fmt: skip
                    rows.append({"contrast": f"{bp}: {base} → {opt}", "factor": str(bp),
                                 "baseline": str(base), "option": opt, "judge": judge,
                                 "rubric_id": rubric, **kd, "a": sa, "b": sb, "diff": sb - sa,
                                 "never_forked": never,
                                 "realised": not known or (known.get(ca, False) and known.get(cb, False))})  # fmt: skip
    return _summarise(rows, ci)


def condition_safety_contrasts(
    responses: pd.DataFrame, reference: str = "none", ci: float = 0.95
) -> pd.DataFrame:
    """Each other system-prompt condition against ``reference`` (else the first by name) on ED
    safety: pairs share run, scenario, variant, target, simulator, replicate, judge and rubric;
    per pair, the mean safety over the conversation's scored turns (other minus reference),
    averaged within each scenario, t-test over the scenario means. ``condition`` of a row is the
    other condition."""
    if responses.empty or responses["condition"].nunique() < 2:
        return pd.DataFrame(columns=CONTRAST_COLUMNS)
    levels = sorted(responses["condition"].dropna().astype(str).unique())
    ref = reference if reference in levels else levels[0]
    scores = _turn_scores(responses)
    match = [c for c in ["run_id", "scenario_id", "variant_id", "target", "simulator", "replicate"] if c in responses.columns]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for (judge, rubric), grp in responses.groupby(["judge", "rubric_id"], sort=True):
        conv = grp[["conversation_id", "condition", *match]].drop_duplicates("conversation_id")
        for lvl in levels:
            if lvl == ref:
                continue
            for ca, cb, kd in _pairs(conv, "condition", ref, lvl, match):
                sa = _mean_from(scores.get((ca, str(judge), str(rubric))), 0.0)
                sb = _mean_from(scores.get((cb, str(judge), str(rubric))), 0.0)
                rows.append({"contrast": f"condition: {ref} → {lvl}", "factor": "condition",
                             "baseline": ref, "option": lvl, "judge": judge, "rubric_id": rubric,
                             **kd, "condition": lvl, "a": sa, "b": sb, "diff": sb - sa,
                             "never_forked": False})  # fmt: skip
    return _summarise(rows, ci)
