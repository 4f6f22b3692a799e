"""Analysis of judged conversations: failure rates, matched contrasts, the ED safety analysis,
judge agreement and reports. Names are imported lazily so that ``import analysis`` stays light.

    from branchpoint.analysis import attach_tree, judgment_table, failure_rates, matched_contrasts
    jt = judgment_table("branchpoint.db", "RUN_ID")
    rates = failure_rates(jt)                       # target x condition x criterion x risk area
    contrasts = matched_contrasts(attach_tree(jt, "branchpoint.db")).contrasts  # post-fork,
    # option minus baseline; primary test over scenario means; McNemar / Wilcoxon secondary
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


if TYPE_CHECKING:  # for type checkers and editors: the names the lazy map serves
    from branchpoint.analysis.contrasts.matched import (
        condition_contrast,
        matched_contrasts,
        simulator_sensitivity,
    )
    from branchpoint.analysis.contrasts.sensitivity import conclusions_by_simulator
    from branchpoint.analysis.ed.responses import ed_analysis, safety_score
    from branchpoint.analysis.ed.turns import (
        condition_safety_contrasts,
        conversation_safety,
        matched_safety_contrasts,
    )
    from branchpoint.analysis.judge_correction.contrasts import judge_corrected_contrasts
    from branchpoint.analysis.judge_correction.estimators import (
        judge_corrected,
        label_plan,
        ppi_contrast,
        ppi_design,
        ppi_mean_iid,
    )
    from branchpoint.analysis.judge_correction.section import judge_correction_section
    from branchpoint.analysis.outcomes.rates import failure_rates
    from branchpoint.analysis.outcomes.reasoning import reasoning_noticed, reply_status
    from branchpoint.analysis.pairing.forks import attach_tree
    from branchpoint.analysis.pairing.realisation import realisation_table
    from branchpoint.analysis.pipeline import run_analysis
    from branchpoint.analysis.raters.agreement import (
        agreement_report,
        cohen_kappa_quadratic,
        krippendorff_alpha,
    )
    from branchpoint.analysis.report.judge_choice import plotted_judge
    from branchpoint.analysis.report.write import write_report
    from branchpoint.analysis.stats.inference import holm, scenario_level_test, sign_flip_pvalue
    from branchpoint.analysis.tables.judgments import (
        conversation_criterion_table,
        human_label_table,
        judgment_table,
    )
    from branchpoint.analysis.tables.versions import keep_versions_apart
    from branchpoint.core.read.units import distinct_ratings
