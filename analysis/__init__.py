"""Analysis of judged conversations: failure rates, matched contrasts, the ED safety analysis,
judge agreement and reports. Names are imported lazily so that ``import analysis`` stays light.

    from analysis import attach_tree, judgment_table, failure_rates, matched_contrasts
    jt = judgment_table("branchpoint.db", "RUN_ID")
    rates = failure_rates(jt)                       # target x condition x criterion x risk area
    contrasts = matched_contrasts(attach_tree(jt, "branchpoint.db")).contrasts  # post-fork,
    # option minus baseline; primary test over scenario means; McNemar / Wilcoxon secondary
"""

from __future__ import annotations

from core.lazy import lazy_getattr

_EXPORTS = {
    "judgment_table": "analysis.tables",
    "conversation_criterion_table": "analysis.tables",
    "human_label_table": "analysis.tables",
    "failure_rates": "analysis.rates",
    "matched_contrasts": "analysis.contrasts",
    "attach_tree": "analysis.forks",
    "keep_versions_apart": "analysis.versions",
    "condition_contrast": "analysis.contrasts",
    "simulator_sensitivity": "analysis.contrasts",
    "realisation_table": "analysis.realisation",
    "conclusions_by_simulator": "analysis.sensitivity",
    "ed_analysis": "analysis.ed",
    "safety_score": "analysis.ed",
    "conversation_safety": "analysis.ed_turns",
    "matched_safety_contrasts": "analysis.ed_turns",
    "condition_safety_contrasts": "analysis.ed_turns",
    "plotted_judge": "analysis.judge_choice",
    "cohen_kappa_quadratic": "analysis.agreement",
    "krippendorff_alpha": "analysis.agreement",
    "agreement_report": "analysis.agreement",
    "reasoning_noticed": "analysis.reasoning",
    "reply_status": "analysis.reasoning",
    "holm": "analysis.stats",
    "scenario_level_test": "analysis.stats",
    "sign_flip_pvalue": "analysis.stats",
    "distinct_ratings": "analysis.forks",
    "run_analysis": "analysis.pipeline",
    "write_report": "analysis.report",
    # judge-corrected failure rates (PPI++) from the labelling design's blind labels
    "judge_corrected": "analysis.judge_correction",
    "label_plan": "analysis.judge_correction",
    "ppi_design": "analysis.judge_correction",
    "ppi_contrast": "analysis.judge_correction",
    "ppi_mean_iid": "analysis.judge_correction",
    "judge_correction_section": "analysis.judge_correction_report",
    "judge_corrected_contrasts": "analysis.judge_correction_contrasts",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
