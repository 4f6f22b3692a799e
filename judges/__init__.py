"""Judges: rubric files, the LLM judge, the heuristic judge, panels, and the judging runner.

    from judges import load_rubric, judge_run
    rubric = load_rubric("teen")                     # or "ed", or a path to a rubric YAML
    summary = judge_run(run_id, db="branchpoint.db", rubric=rubric, judges=["embedded"])

Names are imported lazily so that ``import judges`` stays light (no jinja2, no gateway).
"""

from __future__ import annotations

from core.lazy import lazy_getattr

_EXPORTS = {
    "Rubric": "judges.rubric",
    "Criterion": "judges.rubric",
    "Patterns": "judges.rubric",
    "rubric_json_schema": "judges.rubric",
    "SCALES": "core.scales",
    "load_rubric": "judges.loading",
    "REASONING_RUBRIC": "judges.reasoning_criterion",
    "reasoning_view": "judges.reasoning_criterion",
    "load_rubric_file": "judges.loading",
    "bundled_rubrics": "judges.loading",
    "LLMJudge": "judges.llm_judge",
    "PROMPT_VERSION": "judges.llm_judge",
    "HeuristicJudge": "judges.heuristic",
    "Panel": "judges.panel",
    "CriterionVerdict": "judges.verdicts",
    "JudgingUnit": "judges.verdicts",
    "TranscriptTurn": "judges.verdicts",
    "ed_safety_score": "judges.scoring",
    "judge_run": "judges.runner",
    "ajudge_run": "judges.runner",
    "make_judge": "judges.runner",
    "JudgeSummary": "judges.runner",
    "judge_by_scenario_rubric": "judges.scenario_rubrics",
    "ajudge_by_scenario_rubric": "judges.scenario_rubrics",
    "build_kora_rubric": "judges.kora_rubric",
    # judge --batch: a model judge's calls through its provider's batch API
    "BatchJudging": "judges.batch_judging",
    # the persona's own turns: manipulation checks and realism (issue 36)
    "rate_personas": "judges.persona_checks",
    "arate_personas": "judges.persona_checks",
    "persona_judge_run": "judges.persona_checks",
    "make_persona_rater": "judges.persona_checks",
    "HeuristicPersonaRater": "judges.persona_checks",
    "LLMPersonaRater": "judges.persona_checks",
    "PersonaSummary": "judges.persona_checks",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
