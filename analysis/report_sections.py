"""The report's content: headline tables and sections built from an ``Analysis``, formatted for
people (percentages, points, intervals with their method, realised pairs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis import plots
from analysis.pipeline import Analysis
from analysis.realisation import NOT_REALISED
from analysis.sensitivity import summary_line


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
    links: list[tuple[str, str]] = field(default_factory=list)  # label, relative href


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
