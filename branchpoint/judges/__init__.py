"""Judges: rubric files, the LLM judge, the heuristic judge, panels, and the judging runner.

    from branchpoint.judges import load_rubric, judge_run
    rubric = load_rubric("teen")                     # or "ed", or a path to a rubric YAML
    summary = judge_run(run_id, db="branchpoint.db", rubric=rubric, judges=["embedded"])

Names are imported lazily so that ``import judges`` stays light (no jinja2, no gateway).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    "Rubric": "branchpoint.judges.rubric",
    "Criterion": "branchpoint.judges.rubric",
    "Patterns": "branchpoint.judges.rubric",
    "rubric_json_schema": "branchpoint.judges.rubric",
    "SCALES": "branchpoint.core.scales",
    "load_rubric": "branchpoint.judges.loading",
    "REASONING_RUBRIC": "branchpoint.judges.reasoning_criterion",
    "reasoning_view": "branchpoint.judges.reasoning_criterion",
    "load_rubric_file": "branchpoint.judges.loading",
    "bundled_rubrics": "branchpoint.judges.loading",
    "LLMJudge": "branchpoint.judges.llm_judge",
    "PROMPT_VERSION": "branchpoint.judges.llm_judge",
    "HeuristicJudge": "branchpoint.judges.heuristic",
    "Panel": "branchpoint.judges.panel",
    "CriterionVerdict": "branchpoint.judges.verdicts",
    "JudgingUnit": "branchpoint.judges.verdicts",
    "TranscriptTurn": "branchpoint.judges.verdicts",
    "ed_safety_score": "branchpoint.judges.scoring",
    "judge_run": "branchpoint.judges.runner",
    "ajudge_run": "branchpoint.judges.runner",
    "make_judge": "branchpoint.judges.runner",
    "JudgeSummary": "branchpoint.judges.runner",
    "judge_by_scenario_rubric": "branchpoint.judges.scenario_rubrics",
    "ajudge_by_scenario_rubric": "branchpoint.judges.scenario_rubrics",
    "build_kora_rubric": "branchpoint.judges.kora_rubric",
    # judge --batch: a model judge's calls through its provider's batch API
    "BatchJudging": "branchpoint.judges.batch_judging",
    # the persona's own turns: manipulation checks and realism (issue 36)
    "rate_personas": "branchpoint.judges.persona_checks",
    "arate_personas": "branchpoint.judges.persona_checks",
    "persona_judge_run": "branchpoint.judges.persona_checks",
    "make_persona_rater": "branchpoint.judges.persona_checks",
    "HeuristicPersonaRater": "branchpoint.judges.persona_checks",
    "LLMPersonaRater": "branchpoint.judges.persona_checks",
    "PersonaSummary": "branchpoint.judges.persona_checks",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors: the names the lazy map serves
    from branchpoint.core.scales import SCALES
    from branchpoint.judges.batch_judging import BatchJudging
    from branchpoint.judges.heuristic import HeuristicJudge
    from branchpoint.judges.kora_rubric import build_kora_rubric
    from branchpoint.judges.llm_judge import PROMPT_VERSION, LLMJudge
    from branchpoint.judges.loading import bundled_rubrics, load_rubric, load_rubric_file
    from branchpoint.judges.panel import Panel
    from branchpoint.judges.persona_checks import (
        HeuristicPersonaRater,
        LLMPersonaRater,
        PersonaSummary,
        arate_personas,
        make_persona_rater,
        persona_judge_run,
        rate_personas,
    )
    from branchpoint.judges.reasoning_criterion import REASONING_RUBRIC, reasoning_view
    from branchpoint.judges.rubric import Criterion, Patterns, Rubric, rubric_json_schema
    from branchpoint.judges.runner import JudgeSummary, ajudge_run, judge_run, make_judge
    from branchpoint.judges.scenario_rubrics import (
        ajudge_by_scenario_rubric,
        judge_by_scenario_rubric,
    )
    from branchpoint.judges.scoring import ed_safety_score
    from branchpoint.judges.verdicts import CriterionVerdict, JudgingUnit, TranscriptTurn
