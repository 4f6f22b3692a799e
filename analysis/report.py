"""Run every analysis on a store and write ``report.md`` and a self-contained ``report.html``.

The headline findings come first (what fits on the first screen): overall failure rates with
intervals, the largest matched contrasts with their p-values and number of pairs, the prompt
condition contrast, error-verdict counts, and the ED safety scores when an ED rubric was judged.
Every plot is written as a PNG next to the reports and embedded (base64) in the HTML; a plot with
no data is replaced by a sentence saying why. Every piece of text that came from a model, a user,
a scenario or a spec string is escaped (HTML in the HTML report; HTML and table pipes in Markdown).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import plots
from analysis.agreement import AgreementResult, agreement_report
from analysis.contrasts import (
    ContrastResult,
    condition_contrast,
    matched_contrasts,
    simulator_sensitivity,
)
from analysis.ed import EDResult, ed_analysis
from analysis.rates import error_counts, failure_rates
from analysis.realisation import NOT_REALISED, realisation_summary, unrecorded_note
from analysis.realism import realism_by_simulator, realism_ratings
from analysis.reasoning import reasoning_noticed
from analysis.sensitivity import conclusions_by_simulator, summary_line
from analysis.tables import (
    aggregate,
    conversation_criterion_table,
    conversation_table,
    human_label_table,
    judgment_table,
    resolve_runs,
    turn_table,
)
from analysis.versions import keep_versions_apart, run_config_conflicts, version_conflicts
from core import read
from core.errors import UserError
from core.human_labels import REALISM_RUBRIC


@dataclass
class Analysis:
    """Everything computed for one report (all tables are pandas frames; None: nothing to show)."""

    runs: list[str] | None
    n_conversations: int = 0
    n_judgments: int = 0
    rates: pd.DataFrame | None = None  # target x condition x criterion x risk area (turn level)
    rates_target_condition: pd.DataFrame | None = None
    rates_condition: pd.DataFrame | None = None
    rates_condition_conversation: pd.DataFrame | None = None
    rates_risk_area: pd.DataFrame | None = None
    errors: pd.DataFrame | None = None
    contrasts: ContrastResult | None = None
    condition: ContrastResult | None = None
    simulators: ContrastResult | None = None
    # per branch point x option x target x condition x simulator: arms realised (n of N)
    realisation: pd.DataFrame | None = None
    # per contrast under each simulator against the reference one, and whether it moves
    simulator_conclusions: pd.DataFrame | None = None
    ed: EDResult | None = None
    agreement: AgreementResult | None = None
    realism: pd.DataFrame | None = None  # persona realism ratings by simulator (human labels)
    reasoning: pd.DataFrame | None = None
    examples: pd.DataFrame | None = None
    primary_judge: str | None = None  # the judge plotted when several judged the same runs
    notes: list[str] = field(default_factory=list)


def _ed_rubrics(cc: pd.DataFrame) -> list[str]:
    """Rubrics rated only on levels other than pass/partial/fail (the ED risk levels)."""
    if cc.empty:
        return []
    g = cc.groupby("rubric_id")[["n_rated", "n_fail", "n_partial", "n_other"]].sum()
    n_pass = g["n_rated"] - g["n_fail"] - g["n_partial"] - g["n_other"]
    return sorted(
        str(r) for r in g.index[(g["n_other"] > 0) & (g["n_fail"] + g["n_partial"] + n_pass == 0)]
    )


def refuse_pooled_configs(store_or_db: Any, runs: Sequence[str] | None) -> None:
    """Runs with different configurations that hold the same cells are never pooled silently."""
    hashes = read.run_config_hashes(store_or_db, runs)
    if len(set(hashes.values())) < 2:
        return
    lines = run_config_conflicts(hashes, read.conversation_rows(store_or_db, runs))
    if lines:
        more = f" (and {len(lines) - 1} more pairs of runs)" if len(lines) > 1 else ""
        raise UserError(lines[0] + more)


def run_analysis(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    baselines: Mapping[str, str] | None = None,
    reference_condition: str = "none",
    examples: int = 5,
) -> Analysis:
    runs = resolve_runs(store_or_db, run)
    refuse_pooled_configs(store_or_db, runs)
    a = Analysis(runs=runs)
    all_judgments: pd.DataFrame | None = None  # read once, only when needed

    def judgments() -> pd.DataFrame:
        nonlocal all_judgments
        if all_judgments is None:
            jt, _ = keep_versions_apart(judgment_table(store_or_db, runs))
            all_judgments = jt.merge(tree, on="conversation_id", how="left")  # for the forks
        return all_judgments

    tree = read.conversation_tree(store_or_db, runs)
    version_notes = version_conflicts(read.judgment_versions(store_or_db, runs))
    forked = bool(tree["parent_id"].notna().any()) if not tree.empty else False
    a.notes += version_notes
    if version_notes or forked:
        # Versions must be split and shared prefixes cut: both need the judgment rows.
        cc = aggregate(judgments()) if not judgments().empty else judgments().iloc[0:0]
    else:
        cc = conversation_criterion_table(store_or_db, runs)
    if forked:
        a.notes.append(
            "Arms share their conversation up to the fork: matched contrasts compare only the "
            "turns after the fork (the shared prefix is identical in both arms); rates describe every turn."
        )
    ed_rubrics = _ed_rubrics(cc)
    ppf_rubrics = (
        [r for r in cc["rubric_id"].unique() if r not in ed_rubrics] if not cc.empty else []
    )
    if cc.empty:
        a.notes.append("no judgments in the selected runs: run `branchpoint judge` first")
    elif int(cc["n_rated"].sum()) == 0:
        a.notes.append(
            f"no applicable ratings: every judgment was not applicable or an error ({int(cc['n_error'].sum())} error verdicts)"
        )
    a.n_conversations = int(cc["conversation_id"].nunique()) if not cc.empty else 0
    a.n_judgments = int((cc["n_rated"] + cc["n_error"]).sum()) if not cc.empty else 0
    ppf = cc[cc["rubric_id"].isin(ppf_rubrics)] if not cc.empty else cc
    if not ppf.empty and ppf["judge"].nunique() > 1:
        counts = ppf.groupby("judge")["n_rated"].sum().sort_values(ascending=False)
        model_judges = [j for j in counts.index if j != "heuristic"]
        a.primary_judge = str(model_judges[0] if model_judges else counts.index[0])
        a.notes.append(
            f"Several judges rated these runs ({', '.join(map(str, counts.index))}); every table lists each judge "
            f"separately and the plots show {a.primary_judge}. Verdicts of different judges are never pooled."
        )
    if not ppf.empty:
        a.rates = failure_rates(ppf, n_boot=n_boot, seed=seed)
        a.rates_target_condition = failure_rates(
            ppf, by=("target", "condition"), n_boot=n_boot, seed=seed
        )
        a.rates_condition = failure_rates(ppf, by=("condition",), n_boot=n_boot, seed=seed)
        a.rates_condition_conversation = failure_rates(
            ppf, by=("condition",), level="conversation", n_boot=n_boot, seed=seed
        )
        a.rates_risk_area = failure_rates(
            ppf, by=("risk_area", "condition"), n_boot=n_boot, seed=seed
        )
        paired = ppf
        if forked:
            jt = judgments()
            paired = jt[jt["rubric_id"].isin(ppf_rubrics)]
        realisation = read.realisation_rows(store_or_db, runs)
        unrecorded = unrecorded_note(realisation)
        if unrecorded:
            a.notes.append(unrecorded)
        a.realisation = realisation_summary(
            realisation,
            conversation_table(store_or_db, runs),
            by=("target", "condition", "simulator"),
        )
        a.contrasts = matched_contrasts(
            paired, baselines, n_boot=n_boot, seed=seed, realisation=realisation
        )
        if ppf["condition"].nunique() > 1:
            a.condition = condition_contrast(paired, reference_condition, n_boot=n_boot, seed=seed)
        a.simulators = simulator_sensitivity(paired, n_boot=n_boot, seed=seed)
        if a.simulators is not None:
            a.simulator_conclusions = conclusions_by_simulator(
                paired, realisation, baselines, n_boot=n_boot, seed=seed
            )
    if not cc.empty:
        a.errors = error_counts(cc, by=("judge", "rubric_id", "target"))

    if ed_rubrics:
        ej = judgments()
        a.ed = ed_analysis(
            ej[ej["rubric_id"].isin(ed_rubrics)],
            n_boot=n_boot,
            seed=seed,
            expected=_expected_responses(store_or_db, runs, ej, ed_rubrics),
        )
    labels = human_label_table(store_or_db, runs)
    # realism ratings share the labels table but rate the persona, not a rubric criterion
    realism = labels["rubric_id"] == REALISM_RUBRIC if not labels.empty else None
    if realism is not None and realism.any():
        a.realism = realism_by_simulator(realism_ratings(store_or_db, runs))
        labels = labels[~realism]
    n_judges = cc["judge"].nunique() if not cc.empty else 0
    if not labels.empty or n_judges > 1:
        jt = judgments()
        if not labels.empty and n_judges <= 1:
            jt = jt[jt["conversation_id"].isin(set(labels["conversation_id"]))]
        a.agreement = agreement_report(jt, labels)
    a.reasoning = _reasoning(store_or_db, runs)
    if examples and a.contrasts is not None and not a.contrasts.contrasts.empty:
        a.examples = _examples(store_or_db, runs, a.contrasts.contrasts, examples)
    return a


def _expected_responses(
    store_or_db: Any, runs: Sequence[str] | None, judgments: pd.DataFrame, ed_rubrics: list[str]
) -> pd.DataFrame:
    """The chatbot replies an ED judge should have rated, with their conversation's columns: those
    of the runs (and scenario files) judged with an ED rubric, less conversations judged with
    another rubric. A judge that wrote no row for one is counted as leaving it unrated."""
    ed = judgments[judgments["rubric_id"].isin(ed_rubrics)]
    other = set(judgments.loc[~judgments["rubric_id"].isin(ed_rubrics), "conversation_id"])
    conv = conversation_table(store_or_db, runs)
    conv = conv[conv["run_id"].isin(set(ed["run_id"])) & ~conv["conversation_id"].isin(other)]
    paths = set(ed["scenario_path"].dropna())
    if paths:
        conv = conv[conv["scenario_path"].isna() | conv["scenario_path"].isin(paths)]
    turns = turn_table(store_or_db, runs)
    if turns.empty or conv.empty:
        return turns.iloc[0:0]
    return turns[["conversation_id", "turn_index"]].merge(conv, on="conversation_id", how="inner")


def _reasoning(store_or_db: Any, runs: Sequence[str] | None) -> pd.DataFrame | None:
    turns = turn_table(store_or_db, runs, with_reasoning=True)
    if turns.empty:
        return None
    cids = set(turns["conversation_id"])
    j = read.turn_failures(store_or_db, runs)
    j = j[j["conversation_id"].isin(cids)]
    j["verdict"] = np.where(j["any_fail"] == 1, "fail", "other")
    return reasoning_noticed(j, turns)


def _examples(
    store_or_db: Any, runs: Sequence[str] | None, contrasts: pd.DataFrame, n: int
) -> pd.DataFrame:
    """A few failing replies for the criterion of the strongest contrast (the text is shown literally)."""
    top = contrasts.sort_values(["p_scenario_holm", "diff"], ascending=[True, False]).iloc[0]
    return read.failing_examples(
        store_or_db, runs, rubric=top["rubric_id"], criterion=top["criterion_id"], limit=int(n)
    )


# --------------------------------------------------------------------------- rendering


def _pct(x: Any) -> str:
    return "" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * float(x):.1f}%"


def _pp(x: Any) -> str:
    return "" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * float(x):+.1f}"


def _p(x: Any) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return ""
    return f"{float(x):.2g}" if float(x) >= 1e-4 else f"{float(x):.1e}"


def _num(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return ""
    return f"{float(x):.{digits}f}"


def _interval(lo: Any, hi: Any, fmt: Any) -> str:
    a, b = fmt(lo), fmt(hi)
    return f"{a} to {b}" if a and b else "n/a"


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)  # plain text paragraphs (escaped when rendered)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)  # caption, display frame
    plot: tuple[str, bytes | None, str] | None = None  # file name, png, why missing


def headline_tables(a: Analysis, top: int = 8) -> list[tuple[str, pd.DataFrame]]:
    """The first-screen tables (also what ``branchpoint analyze`` prints)."""
    out: list[tuple[str, pd.DataFrame]] = []
    if a.rates_condition is not None and not a.rates_condition.empty:
        r = a.rates_condition
        conv = a.rates_condition_conversation
        t = pd.DataFrame({
            "condition": r["condition"],
            "failure rate": [_pct(x) for x in r["rate"]],
            "95% interval": [_interval(lo, hi, _pct) for lo, hi in zip(r["ci_low"], r["ci_high"])],
            "fails / ratings": [f"{f} / {n}" for f, n in zip(r["n_fail"], r["n_rated"])],
            "conversation-level rate": [_pct(x) for x in conv["rate"]] if conv is not None else "",
            "error verdicts": r["n_error"],
        })  # fmt: skip
        out.append(
            (
                "Overall failure rate (per applicable rating; partial counts as a rating, errors excluded; conversation-level: share of conversation x criterion pairs where any turn failed)",
                _with_judge(r, t),
            )
        )
    if a.contrasts is not None and not a.contrasts.contrasts.empty:
        c = a.contrasts.contrasts.copy()
        c = c.sort_values(["p_scenario_holm", "diff"], ascending=[True, False]).head(top)
        share = a.contrasts.target_share
        on = [k for k in ("contrast", "criterion_id", "judge", "condition") if k in c.columns]
        if share is not None and not share.empty:
            c = c.merge(share[[*on, "share_raised", "n_targets"]], on=on, how="left")
        else:
            c = c.assign(share_raised=np.nan, n_targets=np.nan)
        t = pd.DataFrame({
            "contrast": c["contrast"], "condition": _column(c, "condition"), "criterion": c["criterion_id"],
            "post-fork rate base → option": [f"{_pct(x)} → {_pct(y)}" for x, y in zip(c["rate_a"], c["rate_b"])],
            "diff (pp, per protocol)": _realised_diff(c),
            "95% interval (t, scenarios)": [_interval(lo, hi, _pp) for lo, hi in zip(c["ci_low"], c["ci_high"])],
            "scenarios": c["n_scenarios"], "realised pairs": _realised_pairs(c),
            "diff (pp, intention to treat)": [_pp(x) for x in _values(c, "diff_itt")],
            "p scenario-level (Holm)": [_p(x) for x in c["p_scenario_holm"]],
            "McNemar p (Holm; not cluster-adjusted)": [_p(x) for x in c["p_mcnemar_holm"]],
            "Wilcoxon p (Holm; not cluster-adjusted)": [_p(x) for x in c["p_wilcoxon_holm"]],
            "targets raised": [f"{_pct(s)} of {int(n)}" if n == n else "" for s, n in zip(c["share_raised"], c["n_targets"])],
        })  # fmt: skip
        out.append(
            (
                "Largest matched contrasts (option minus baseline, turns after the fork; paired by "
                "scenario, target, condition, replicate and other choices; primary test over "
                "scenario means)",
                _with_judge(c, t),
            )
        )
    if a.realisation is not None and not a.realisation.empty:
        out.append((REALISATION_CAPTION, _realisation_display(a.realisation)))
    if a.condition is not None and not a.condition.per_target.empty:
        pt = a.condition.per_target
        allc = pt[pt["criterion_id"] == "(all criteria)"]
        t = pd.DataFrame({
            "contrast": allc["contrast"], "target": allc["target"],
            "rate ref → other": [f"{_pct(x)} → {_pct(y)}" for x, y in zip(allc["rate_a"], allc["rate_b"])],
            "diff (pp)": [_pp(x) for x in allc["diff"]],
            "95% interval (t, scenarios)": [_interval(lo, hi, _pp) for lo, hi in zip(allc["ci_low"], allc["ci_high"])],
            "scenarios": allc["n_scenarios"], "pairs": allc["n_pairs"],
        })  # fmt: skip
        out.append(
            (
                "System-prompt condition, all criteria, per target (paired by variant; other minus reference)",
                _with_judge(allc, t),
            )
        )
    if a.ed is not None and not a.ed.by_model.empty:
        keys = [c for c in ("target", "condition", "judge") if c in a.ed.bio.columns]
        m = (
            a.ed.by_model.merge(
                a.ed.bio.drop(columns=["ci_low", "ci_high"], errors="ignore"), on=keys, how="left"
            )
            if not a.ed.bio.empty
            else a.ed.by_model
        )
        t = pd.DataFrame({
            "target": m["target"], "condition": _column(m, "condition"), "safety": [_num(x) for x in m["safety"]],
            "95% interval": [_interval(lo, hi, _num) for lo, hi in zip(m["ci_low"], m["ci_high"])],
            "interval": _column(m, "interval"),
            "no bio → bio": [f"{_num(x)} → {_num(y)}" for x, y in zip(m.get("safety_no_bio", np.nan), m.get("safety_bio", np.nan))],
            "refusal rate": [_pct(x) for x in m["refusal_rate"]], "high-risk responses": [_pct(x) for x in m["high_risk_share"]],
            "responses": m["n_responses"], "scored (complete)": _column(m, "n_scored"),
            "incomplete (no score)": _column(m, "n_incomplete"),
        })  # fmt: skip
        out.append(
            (
                "ED safety score (0-100, complete ratings only; refusals left out and counted; per target x condition)",
                _with_judge(m, t),
            )
        )
    if a.errors is not None and not a.errors.empty:
        e = a.errors.groupby(["judge", "rubric_id"], as_index=False)[["n_error", "n_rated"]].sum()
        out.append(("Error verdicts (a judge that could not answer; never counted as pass)", e))
    return out


METHODS = (
    "Realised branches: an arm realised its option when the branch point fired and the option's "
    "instruction was in force for at least one persona turn (derived from the stored turns). "
    "Matched contrasts are per protocol: only pairs whose two arms both realised their option "
    "('realised pairs', n of the pairs assigned). Beside them, labelled, the intention-to-treat "
    "figure over every assigned pair, where a pair that never forked is one conversation in both "
    "arms and enters with a difference of zero. A contrast without a realised pair is reported as "
    "not realised, never as a zero effect.",
    "Sign convention: every difference is the option (or other condition, or level b) minus the "
    "baseline (reference, level a). For failure rates a positive difference means the option fails "
    "more; for ED safety scores a positive difference means level b is safer. The rank-biserial "
    "correlation is signed like the failure difference (> 0: the option scored lower).",
    "Matched contrasts compare only the turns after the two arms fork (the shared prefix is one "
    "conversation in both arms). Per pair: the post-fork failure proportion of each arm; the "
    "conversation-level outcome is whether any post-fork turn failed. Results are per condition "
    "(never pooled) and, in the per-target tables, per target x condition.",
    "Primary test: the scenario is the independent unit. Each pair's difference is averaged within "
    "its scenario and a one-sample t-test runs over the scenario means (df = scenarios - 1); the "
    "95% interval is the matching t interval. A group from one scenario has no scenario-level "
    "test or interval. Secondary, pair-level and NOT cluster-adjusted: McNemar's exact test on the "
    "conversation-level outcome and the Wilcoxon signed-rank test on pair scores (differences "
    "rounded before ranking, so equal differences tie exactly). Friedman tests use scenarios as "
    "blocks; in the ED analysis questions play the role of scenarios.",
    "Adjustment: Holm's step-down correction across each family of p-values of one table (each "
    "kind of p-value separately). Intervals are per comparison, 95%, not adjusted for "
    "multiplicity. 'Targets raised' counts targets whose own scenario-level interval lies above "
    "zero; a target with one scenario has no interval and is never counted as raised.",
    "Failure-rate intervals: a cluster bootstrap over scenarios only with 30 scenarios or more and "
    "a rate strictly between 0 and 100%; otherwise a Wilson interval on the effective sample size "
    "(ratings divided by the design effect estimated from the scenarios), or a plain Wilson "
    "interval labelled 'one scenario'. Each row names its interval.",
    "ED safety scores use complete ratings only (every dimension rated; refusals left out per the "
    "rubric's policy); other responses are counted as incomplete. Judgments from different rubric "
    "hashes or judge-prompt versions are analysed apart and named.",
)


def build_sections(a: Analysis) -> list[Section]:
    secs: list[Section] = []
    head = Section("Headline findings")
    head.text.append(
        f"{a.n_conversations} conversations, {a.n_judgments} ratings (applicable ratings plus error verdicts)"
        + (f", runs: {', '.join(a.runs)}" if a.runs else ", all runs")
        + "."
    )
    head.text += a.notes
    head.tables = headline_tables(a)
    if not head.tables:
        head.text.append("No judged conversations to summarise.")
    secs.append(head)
    secs.append(Section("Methods and conventions", text=list(METHODS)))

    s = Section("Failure rate by target and condition")
    s.plot = ("failure_by_target_condition.png", plots.failure_by_target_condition(_one_judge(a, a.rates_target_condition)),
              "no applicable pass/partial/fail ratings")  # fmt: skip
    if a.rates_risk_area is not None and not a.rates_risk_area.empty:
        s.tables.append(
            ("By risk area", _rate_display(a.rates_risk_area, ["risk_area", "condition"]))
        )
    secs.append(s)

    s = Section("Failure rate by criterion")
    s.plot = (
        "criterion_heatmap.png",
        plots.criterion_heatmap(_one_judge(a, a.rates)),
        "no applicable pass/partial/fail ratings",
    )
    if a.rates is not None and not a.rates.empty:
        s.tables.append(
            (
                "Every target x condition x criterion",
                _rate_display(a.rates, ["target", "condition", "criterion_id", "risk_area"]),
            )
        )
    secs.append(s)

    s = Section("Matched contrasts")
    why = "no matched pairs (a sweep needs arms that differ in one branch point only)"
    s.plot = (
        "forest_contrasts.png",
        plots.forest_plot(
            _realised_only(_one_judge(a, a.contrasts.contrasts)) if a.contrasts else None
        ),
        why,
    )
    if a.realisation is not None and not a.realisation.empty:
        s.tables.append((REALISATION_CAPTION, _realisation_display(a.realisation)))
    if a.contrasts is not None:
        s.text += [
            f"Baseline of {b}: {o} ({src})."
            for b, o, src in a.contrasts.baselines.itertuples(index=False)
        ]
        s.text += a.contrasts.notes
        if not a.contrasts.contrasts.empty:
            s.tables.append(
                (
                    "All contrasts (option minus baseline, post-fork; Holm across the family)",
                    _contrast_display(a.contrasts.contrasts),
                )
            )
        if not a.contrasts.target_share.empty:
            ts = a.contrasts.target_share
            s.tables.append(("Share of targets where the option raised / lowered failure (interval excludes 0)", pd.DataFrame({
                "contrast": ts["contrast"], "criterion": ts["criterion_id"], "targets": ts["n_targets"],
                "higher (point)": [_pct(x) for x in ts["share_higher"]], "raised": [_pct(x) for x in ts["share_raised"]],
                "lowered": [_pct(x) for x in ts["share_lowered"]], "median diff (pp)": [_pp(x) for x in ts["median_diff"]]})))  # fmt: skip
        if not a.contrasts.friedman.empty:
            f = a.contrasts.friedman
            s.tables.append(("Friedman tests, branch points with 3+ options (scenarios as blocks: each option's mean post-fork score per scenario)", pd.DataFrame({
                "branch point": f["branch_point"], "options": f["options"], "condition": _column(f, "condition"),
                "criterion": f["criterion_id"], "scenarios (blocks)": f["n_blocks"],
                "chi2": [_num(x, 2) for x in f["statistic"]], "p": [_p(x) for x in f["pvalue"]], "p (Holm)": [_p(x) for x in f["p_holm"]],
                "Kendall W": [_num(x, 3) for x in f["kendall_w"]]})))  # fmt: skip
    secs.append(s)

    s = Section("System-prompt condition contrast")
    if a.condition is not None and not a.condition.contrasts.empty:
        s.tables.append(
            ("Paired by variant, per criterion", _contrast_display(a.condition.contrasts))
        )
        s.text += a.condition.notes
    else:
        s.text.append("Only one system-prompt condition in the data: no condition contrast.")
    secs.append(s)

    s = Section("Simulator sensitivity")
    if a.simulators is not None and not a.simulators.per_target.empty:
        pt = a.simulators.per_target
        allc = pt[pt["criterion_id"] == "(all criteria)"]
        s.tables.append(("Failure-rate difference per target between simulators (all criteria)", pd.DataFrame({
            "contrast": allc["contrast"], "target": allc["target"], "diff (pp)": [_pp(x) for x in allc["diff"]],
            "95% interval": [_interval(lo, hi, _pp) for lo, hi in zip(allc["ci_low"], allc["ci_high"])], "pairs": allc["n_pairs"]})))  # fmt: skip
    if a.simulator_conclusions is not None:
        sc = a.simulator_conclusions
        s.text.append(summary_line(sc))
        if not sc.empty:
            s.tables.append(("Matched contrasts under each simulator (same cells; per protocol; does the conclusion move?)", pd.DataFrame({
                "contrast": sc["contrast"], "condition": _column(sc, "condition"), "criterion": sc["criterion_id"],
                "reference": sc["simulator_ref"], "other": sc["simulator_other"],
                "diff (pp) reference": _realised_diff(sc.assign(diff=sc["diff_ref"], realisation=sc["realisation_ref"])),
                "diff (pp) other": _realised_diff(sc.assign(diff=sc["diff_other"], realisation=sc["realisation_other"])),
                "p (Holm) reference": [_p(x) for x in sc["p_scenario_holm_ref"]],
                "p (Holm) other": [_p(x) for x in sc["p_scenario_holm_other"]],
                "realised pairs ref / other": [f"{_int(x)} / {_int(y)}" for x, y in zip(sc["n_pairs_ref"], sc["n_pairs_other"])],
                "conclusion": sc["verdict"]})))  # fmt: skip
    if a.simulators is None:
        s.text.append("One simulator in the data: no sensitivity analysis across simulators.")
    elif a.simulators.per_target.empty:
        s.text.append(
            "Several simulators, but no cell (run, scenario, variant, target, condition, "
            "replicate) was played by more than one: nothing to pair."
        )
    secs.append(s)

    s = Section("Eating-disorder safety scores")
    s.plot = (
        "ed_safety.png",
        plots.ed_safety(a.ed.by_model, a.ed.bio) if a.ed else None,
        "no risk-level (ED) judgments",
    )
    if a.ed is not None:
        s.text += a.ed.notes
        for cap, df in (("Explicit cue vs none (matched bios)", a.ed.cue), ("Matched attribute contrasts (diff = level b - level a)", a.ed.attributes),
                        ("Friedman, attributes with 3+ levels", a.ed.friedman), ("Per-dimension score with and without cue", a.ed.cue_dimensions),
                        ("Level shares per dimension", a.ed.dimensions)):  # fmt: skip
            if df is not None and not df.empty:
                s.tables.append((cap, _round(df)))
    secs.append(s)

    s = Section("Judge agreement")
    if a.agreement is not None and not a.agreement.pairs.empty:
        s.tables.append(
            (
                "Rater pairs (under/over: the first rater saw less/more risk)",
                _round(a.agreement.pairs, 3),
            )
        )
        if not a.agreement.alpha_all.empty:
            s.tables.append(("Krippendorff's alpha, all raters", _round(a.agreement.alpha_all, 3)))
        s.text.append(f"Error verdicts left out of agreement: {a.agreement.n_errors}.")
        s.text += a.agreement.notes
    else:
        s.text.append(_no_agreement(a))
    secs.append(s)

    if a.realism is not None and not a.realism.empty:
        s = Section("Persona realism by simulator")
        s.text.append(
            "People rated persona turns very / mostly / mixed / not realistic, blind to the "
            "simulator; share_realistic is very or mostly, with a Wilson 95% interval."
        )
        s.tables.append(("Realism ratings by simulator", _round(a.realism, 3)))
        secs.append(s)

    s = Section("Reasoning traces")
    if a.reasoning is not None and not a.reasoning.empty:
        s.tables.append(
            (
                "Failing replies whose reasoning noticed the risk (keyword rules)",
                _round(a.reasoning, 3),
            )
        )
    else:
        s.text.append("No reasoning text stored for these replies.")
    secs.append(s)

    if a.examples is not None and not a.examples.empty:
        s = Section("Examples of failing replies (shown literally)")
        s.tables.append(
            (
                "Criterion of the strongest contrast",
                a.examples.assign(content=a.examples["content"].astype(str).str.slice(0, 400)),
            )
        )
        secs.append(s)
    return secs


def _no_agreement(a: Analysis) -> str:
    """Why there are no agreement statistics, counting judges as the headline does."""
    judges = _judges(a)
    if len(judges) > 1:
        return (
            f"{len(judges)} judges rated these runs ({', '.join(judges)}), but no turn or "
            "conversation was rated by two of them on the same criterion, and there are no human "
            "labels: no agreement statistics."
        )
    return "No human labels and a single judge: no agreement statistics."


def _judges(a: Analysis) -> list[str]:
    frames = [a.errors, a.rates]
    for df in frames:
        if df is not None and not df.empty and "judge" in df.columns:
            return sorted(str(j) for j in df["judge"].dropna().unique())
    return []


def _int(x: Any) -> str:
    return "0" if x is None or x != x else str(int(x))


def _realised_only(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """Contrasts with a per-protocol figure: a branch never realised has no point to plot."""
    if df is None or "realisation" not in df.columns:
        return df
    return df[(df["realisation"] != NOT_REALISED).to_numpy()]


def _one_judge(a: Analysis, df: pd.DataFrame | None) -> pd.DataFrame | None:
    if df is None or a.primary_judge is None or "judge" not in df.columns:
        return df
    return df[df["judge"] == a.primary_judge]


def _with_judge(src: pd.DataFrame, shown: pd.DataFrame) -> pd.DataFrame:
    """Put the judge column first when several judges are in the table."""
    if "judge" in src.columns and src["judge"].nunique() > 1:
        shown = shown.copy()
        shown.insert(0, "judge", src["judge"].to_numpy())
    return shown


def _round(df: pd.DataFrame, digits: int = 2) -> pd.DataFrame:
    out = df.copy()
    for c in out.columns:
        if pd.api.types.is_float_dtype(out[c]):
            out[c] = out[c].map(
                lambda v: (
                    ""
                    if v != v
                    else (f"{v:.2e}" if 0 < abs(v) < 10**-digits else f"{v:.{digits}f}")
                )
            )
    return out


def _rate_display(r: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    out = r[[k for k in keys if k in r.columns]].copy()
    if "judge" in r.columns and "judge" not in out.columns:
        out.insert(0, "judge", r["judge"].to_numpy())
    out["failure rate"] = [_pct(x) for x in r["rate"]]
    out["95% interval"] = [_interval(lo, hi, _pct) for lo, hi in zip(r["ci_low"], r["ci_high"])]
    out["interval"] = _column(r, "interval")
    out["fails"] = r["n_fail"]
    out["partials"] = r["n_partial"]
    out["ratings"] = r["n_rated"]
    out["errors"] = r["n_error"]
    return out


REALISATION_CAPTION = (
    "Realised branches: arms whose option came into force (its trigger fired and the persona "
    "followed it for at least one turn), per branch point x option x target (n of N)"
)


def _realised_diff(c: pd.DataFrame) -> list[str]:
    """The per-protocol difference, or "not realised" (never a zero effect)."""
    state = _column(c, "realisation")
    return [NOT_REALISED if r == NOT_REALISED else _pp(x) for x, r in zip(c["diff"], state)]


def _realised_pairs(c: pd.DataFrame) -> list[str]:
    """Pairs realised in both arms, of the pairs assigned (a table without realisation: pairs)."""
    if "n_pairs_itt" not in c.columns:
        return [str(n) for n in c["n_pairs"]]
    return [
        f"{int(n)} of {int(m)}" if m == m else str(int(n))
        for n, m in zip(c["n_pairs"], c["n_pairs_itt"])
    ]


def _realisation_display(r: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "branch point": r["branch_point"], "option": r["option"], "target": _column(r, "target"),
        "condition": _column(r, "condition"), "simulator": _column(r, "simulator"),
        "realised": r["realised"], "median first exchange": [_num(x, 1) for x in r["first_exchange"]],
    })  # fmt: skip


def _contrast_display(c: pd.DataFrame) -> pd.DataFrame:
    return _with_judge(c, pd.DataFrame({
        "contrast": c["contrast"], "condition": _column(c, "condition"), "criterion": c["criterion_id"],
        "scenarios": c["n_scenarios"], "realised pairs": _realised_pairs(c),
        "rate a": [_pct(x) for x in c["rate_a"]], "rate b": [_pct(x) for x in c["rate_b"]],
        "diff (pp)": _realised_diff(c),
        "diff (pp, intention to treat)": [_pp(x) for x in _values(c, "diff_itt")],
        "95% interval (intention to treat)": [
            _interval(lo, hi, _pp) for lo, hi in zip(_values(c, "ci_low_itt"), _values(c, "ci_high_itt"))
        ],
        "p scenario (Holm, intention to treat)": [_p(x) for x in _values(c, "p_scenario_itt_holm")],
        "95% interval": [_interval(lo, hi, _pp) for lo, hi in zip(c["ci_low"], c["ci_high"])],
        "interval": c["interval"], "p scenario": [_p(x) for x in c["p_scenario"]],
        "p scenario (Holm)": [_p(x) for x in c["p_scenario_holm"]],
        "conv. diff (pp)": [_pp(x) for x in c["diff_conv"]],
        "p conv. scenario (Holm)": [_p(x) for x in c["p_conv_scenario_holm"]],
        "McNemar b/c (not cluster-adj.)": [f"{b}/{cc}" for b, cc in zip(c["discordant_b"], c["discordant_a"])],
        "p McNemar (not cluster-adj.)": [_p(x) for x in c["p_mcnemar"]], "p McNemar (Holm)": [_p(x) for x in c["p_mcnemar_holm"]],
        "p Wilcoxon (not cluster-adj.)": [_p(x) for x in c["p_wilcoxon"]], "p Wilcoxon (Holm)": [_p(x) for x in c["p_wilcoxon_holm"]],
        "rank-biserial (> 0: option worse)": [_num(x, 2) for x in c["rank_biserial"]],
        "dropped: only baseline rated": _column(c, "n_only_baseline"),
        "dropped: only option rated": _column(c, "n_only_option"),
    }))  # fmt: skip


def _values(df: pd.DataFrame, col: str) -> Any:
    """A numeric column to format, or NaNs (shown blank) when this table has none."""
    return df[col].to_numpy() if col in df.columns else [np.nan] * len(df)


def _column(df: pd.DataFrame, col: str) -> Any:
    """A column to show, or blanks when this table has none (e.g. no condition split)."""
    return df[col].to_numpy() if col in df.columns else [""] * len(df)


# --------------------------------------------------------------------------- writers


def _md_cell(v: Any) -> str:
    text = "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)
    text = html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ").replace("\r", " ")
    return text.replace("`", "\\`").replace("*", "\\*").replace("_", "\\_").replace("[", "\\[")


def _md_table(df: pd.DataFrame, max_rows: int = 200) -> str:
    d = df.head(max_rows)
    lines = [
        "| " + " | ".join(_md_cell(c) for c in d.columns) + " |",
        "|" + "---|" * len(d.columns),
    ]
    for row in d.itertuples(index=False):
        lines.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
    if len(df) > max_rows:
        lines.append(f"\n({len(df) - max_rows} more rows in the exported tables)")
    return "\n".join(lines)


def _md_text(s: str) -> str:
    return (
        html.escape(s, quote=False)
        .replace("*", "\\*")
        .replace("_", "\\_")
        .replace("[", "\\[")
        .replace("`", "\\`")
    )


def render_markdown(sections: list[Section], title: str) -> str:
    out = [f"# {_md_text(title)}", "", "Generated by branchpoint. Synthetic or small-model data measures the pipeline, "
           "not a chatbot's real safety; the rubrics are not clinically validated.", ""]  # fmt: skip
    for s in sections:
        out += [f"## {_md_text(s.title)}", ""]
        for t in s.text:
            out += [_md_text(t), ""]
        if s.plot is not None:
            name, png, why = s.plot
            out += [
                f"![{_md_text(s.title)}]({name})" if png else f"*No plot: {_md_text(why)}.*",
                "",
            ]
        for cap, df in s.tables:
            out += [f"**{_md_text(cap)}**", "", _md_table(df), ""]
    return "\n".join(out)


CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:12px;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
th{background:#f3f3f3}h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;margin-top:1.6em}img{max-width:100%}
.note{color:#666;font-style:italic}.warn{background:#fff6e0;padding:.5em;border:1px solid #f0d9a0}"""


def render_html(sections: list[Section], title: str) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        # No scripts, no remote content: the page is inert whatever the transcripts contain.
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">",
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<p class='warn'>Synthetic or small-model data measures the pipeline, not a chatbot's real safety; "
        "the rubrics are not clinically validated.</p>",
    ]
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        for t in s.text:
            parts.append(f"<p>{html.escape(t)}</p>")
        if s.plot is not None:
            name, png, why = s.plot
            if png:
                b64 = base64.b64encode(png).decode("ascii")
                parts.append(
                    f"<img alt='{html.escape(s.title)}' src='data:image/png;base64,{b64}'>"
                )
            else:
                parts.append(f"<p class='note'>No plot: {html.escape(why)}.</p>")
        for cap, df in s.tables:
            parts.append(f"<h3>{html.escape(cap)}</h3>")
            parts.append(df.head(500).to_html(index=False, escape=True, na_rep="", border=0))
    parts.append("</body></html>")
    return "\n".join(parts)


@dataclass
class ReportFiles:
    markdown: Path
    html: Path
    plots: list[Path]
    missing_plots: list[str]


def write_report(
    store_or_db: Any,
    out_dir: str | Path,
    run: str | Sequence[str] | None = None,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    baselines: Mapping[str, str] | None = None,
    analysis: Analysis | None = None,
    title: str | None = None,
) -> ReportFiles:
    """Analyse (unless ``analysis`` is given) and write report.md, report.html and the PNG plots."""
    a = analysis or run_analysis(store_or_db, run, n_boot=n_boot, seed=seed, baselines=baselines)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = build_sections(a)
    written, missing = [], []
    for s in sections:
        if s.plot is not None:
            name, png, _why = s.plot
            if png:
                (out / name).write_bytes(png)
                written.append(out / name)
            else:
                missing.append(name)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = title or f"branchpoint report: {', '.join(a.runs) if a.runs else 'all runs'} ({stamp})"
    md = out / "report.md"
    md.write_text(render_markdown(sections, title), encoding="utf-8")
    page = out / "report.html"
    page.write_text(render_html(sections, title), encoding="utf-8")
    return ReportFiles(md, page, written, missing)
