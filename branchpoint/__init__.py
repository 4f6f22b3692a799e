"""branchpoint: multi-turn safety evaluation of chatbots with vulnerable users.

The calls a notebook or a script makes, in one place (each package keeps its fuller API)::

    from branchpoint import plan_study, run_study, open_store, judgment_table, failure_rates
    plan = plan_study("study.yaml")      # cells, calls, tokens, dollars, wall time, power
    result = run_study(plan)             # in a notebook: await arun_study(plan)
    rates = failure_rates(judgment_table(plan.store_url, [plan.sweep_id]))

Names are imported on first use (as every package's are), so ``import branchpoint`` loads none
of pandas, litellm or torch; the ``TYPE_CHECKING`` imports below give type checkers and editors
the real types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    # the store, and the error every layer raises for bad input
    "open_store": "branchpoint.core.store",
    "Store": "branchpoint.core.store",
    "UserError": "branchpoint.core.errors",
    # reading what a run stored (DataFrames)
    "conversation_rows": "branchpoint.core.read",
    "turn_rows": "branchpoint.core.read",
    "judgment_rows": "branchpoint.core.read",
    "run_costs": "branchpoint.core.read",
    # scenarios: the bundled library, loading and checking a folder of them
    "LIBRARY": "branchpoint.scenarios.bundled",
    "load_scenarios": "branchpoint.scenarios.loader",
    "validate_paths": "branchpoint.scenarios.validate",
    # a study from one manifest: plan it, run it
    "plan_study": "branchpoint.study.api",
    "run_study": "branchpoint.study.api",
    "arun_study": "branchpoint.study.api",
    "StudyPlan": "branchpoint.study.api",
    "StudyResult": "branchpoint.study.api",
    "load_manifest": "branchpoint.study.manifest",
    "Manifest": "branchpoint.study.manifest",
    # a single run without a manifest
    "run_scenarios": "branchpoint.simulator.runner",
    "RunConfig": "branchpoint.simulator.run_config",
    "RunResult": "branchpoint.simulator.lifecycle",
    # judging stored conversations
    "load_rubric": "branchpoint.judges.loading",
    "judge_run": "branchpoint.judges.runner",
    "ajudge_run": "branchpoint.judges.runner",
    "JudgeSummary": "branchpoint.judges.runner",
    # analysis and the report
    "judgment_table": "branchpoint.analysis.tables.judgments",
    "failure_rates": "branchpoint.analysis.outcomes.rates",
    "attach_tree": "branchpoint.analysis.pairing.forks",
    "matched_contrasts": "branchpoint.analysis.contrasts.matched",
    "condition_contrast": "branchpoint.analysis.contrasts.matched",
    "ed_analysis": "branchpoint.analysis.ed.responses",
    "agreement_report": "branchpoint.analysis.raters.agreement",
    "judge_corrected": "branchpoint.analysis.judge_correction.estimators",
    "run_analysis": "branchpoint.analysis.pipeline",
    "write_report": "branchpoint.analysis.report.write",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors: the names the lazy map serves
    from branchpoint.analysis.contrasts.matched import condition_contrast, matched_contrasts
    from branchpoint.analysis.ed.responses import ed_analysis
    from branchpoint.analysis.judge_correction.estimators import judge_corrected
    from branchpoint.analysis.outcomes.rates import failure_rates
    from branchpoint.analysis.pairing.forks import attach_tree
    from branchpoint.analysis.pipeline import run_analysis
    from branchpoint.analysis.raters.agreement import agreement_report
    from branchpoint.analysis.report.write import write_report
    from branchpoint.analysis.tables.judgments import judgment_table
    from branchpoint.core.errors import UserError
    from branchpoint.core.read import conversation_rows, judgment_rows, run_costs, turn_rows
    from branchpoint.core.store import Store, open_store
    from branchpoint.judges.loading import load_rubric
    from branchpoint.judges.runner import JudgeSummary, ajudge_run, judge_run
    from branchpoint.scenarios.bundled import LIBRARY
    from branchpoint.scenarios.loader import load_scenarios
    from branchpoint.scenarios.validate import validate_paths
    from branchpoint.simulator.lifecycle import RunResult
    from branchpoint.simulator.run_config import RunConfig
    from branchpoint.simulator.runner import run_scenarios
    from branchpoint.study.api import StudyPlan, StudyResult, arun_study, plan_study, run_study
    from branchpoint.study.manifest import Manifest, load_manifest
