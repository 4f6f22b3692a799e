"""Analysis of judged conversations: failure rates, matched contrasts, the ED safety analysis,
judge agreement and reports. Names are imported lazily so that ``import analysis`` stays light.

    from branchpoint.analysis import attach_tree, judgment_table, failure_rates, matched_contrasts
    jt = judgment_table("branchpoint.db", "RUN_ID")
    rates = failure_rates(jt)                       # target x condition x criterion x risk area
    contrasts = matched_contrasts(attach_tree(jt, "branchpoint.db")).contrasts  # post-fork,
    # option minus baseline; primary test over scenario means; McNemar / Wilcoxon secondary
"""

from __future__ import annotations

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    "judgment_table": "branchpoint.analysis.tables.judgments",
    "conversation_criterion_table": "branchpoint.analysis.tables.judgments",
    "human_label_table": "branchpoint.analysis.tables.judgments",
    "failure_rates": "branchpoint.analysis.outcomes.rates",
    "matched_contrasts": "branchpoint.analysis.contrasts.matched",
    "attach_tree": "branchpoint.analysis.pairing.forks",
    "keep_versions_apart": "branchpoint.analysis.tables.versions",
    "condition_contrast": "branchpoint.analysis.contrasts.matched",
    "simulator_sensitivity": "branchpoint.analysis.contrasts.matched",
    "realisation_table": "branchpoint.analysis.pairing.realisation",
    "conclusions_by_simulator": "branchpoint.analysis.contrasts.sensitivity",
    "ed_analysis": "branchpoint.analysis.ed.responses",
    "safety_score": "branchpoint.analysis.ed.responses",
    "conversation_safety": "branchpoint.analysis.ed.turns",
    "matched_safety_contrasts": "branchpoint.analysis.ed.turns",
    "condition_safety_contrasts": "branchpoint.analysis.ed.turns",
    "plotted_judge": "branchpoint.analysis.report.judge_choice",
    "cohen_kappa_quadratic": "branchpoint.analysis.raters.agreement",
    "krippendorff_alpha": "branchpoint.analysis.raters.agreement",
    "agreement_report": "branchpoint.analysis.raters.agreement",
    "reasoning_noticed": "branchpoint.analysis.outcomes.reasoning",
    "reply_status": "branchpoint.analysis.outcomes.reasoning",
    "holm": "branchpoint.analysis.stats.inference",
    "scenario_level_test": "branchpoint.analysis.stats.inference",
    "sign_flip_pvalue": "branchpoint.analysis.stats.inference",
    "distinct_ratings": "branchpoint.core.read.units",
    "run_analysis": "branchpoint.analysis.pipeline",
    "write_report": "branchpoint.analysis.report.write",
    # judge-corrected failure rates (PPI++) from the labelling design's blind labels
    "judge_corrected": "branchpoint.analysis.judge_correction.estimators",
    "label_plan": "branchpoint.analysis.judge_correction.estimators",
    "ppi_design": "branchpoint.analysis.judge_correction.estimators",
    "ppi_contrast": "branchpoint.analysis.judge_correction.estimators",
    "ppi_mean_iid": "branchpoint.analysis.judge_correction.estimators",
    "judge_correction_section": "branchpoint.analysis.judge_correction.section",
    "judge_corrected_contrasts": "branchpoint.analysis.judge_correction.contrasts",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
