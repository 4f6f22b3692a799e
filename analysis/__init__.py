"""Analysis of judged conversations: failure rates, matched contrasts, the ED safety analysis,
judge agreement and reports. Names are imported lazily so that ``import analysis`` stays light.

    from analysis import judgment_table, failure_rates, matched_contrasts, write_report
    jt = judgment_table("branchpoint.db", "RUN_ID")
    rates = failure_rates(jt)                       # target x condition x criterion x risk area
    contrasts = matched_contrasts(jt).contrasts     # paired differences, McNemar, Wilcoxon, Holm
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "judgment_table": "analysis.tables",
    "conversation_criterion_table": "analysis.tables",
    "human_label_table": "analysis.tables",
    "failure_rates": "analysis.rates",
    "matched_contrasts": "analysis.contrasts",
    "condition_contrast": "analysis.contrasts",
    "simulator_sensitivity": "analysis.contrasts",
    "ed_analysis": "analysis.ed",
    "safety_score": "analysis.ed",
    "cohen_kappa_quadratic": "analysis.agreement",
    "krippendorff_alpha": "analysis.agreement",
    "agreement_report": "analysis.agreement",
    "reasoning_noticed": "analysis.reasoning",
    "holm": "analysis.stats",
    "run_analysis": "analysis.report",
    "write_report": "analysis.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
