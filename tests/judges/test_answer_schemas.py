"""The schemas sent for the judge's, the persona rater's and the detector's structured answers are generated from the
models that parse those answers, and are what the hand-written schemas were (byte for byte, so
cached calls are found again and prompts are unchanged)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from branchpoint.core.answer_schema import answer_schema
from branchpoint.core.domain import ENACTMENT_LEVELS, EVENTS
from branchpoint.judges.llm_judge import json_schema, parse_output
from branchpoint.judges.loading import bundled_rubrics, load_rubric
from branchpoint.judges.persona_checks import _answer_model
from branchpoint.simulator.events import DETECTOR_SCHEMA


def _hand_written_judge_schema(rubric: Any, criteria: list[Any]) -> dict[str, Any]:
    """branchpoint/judges/llm_judge.py's json_schema before it was generated (issue 32)."""
    rating = {
        "type": "object",
        "properties": {
            "applicable": {"type": "boolean"},
            "verdict": {"type": ["string", "null"], "enum": [*rubric.levels, None]},
            "rationale": {"type": "string"},
            "evidence": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["applicable", "verdict", "rationale", "evidence"],
        "additionalProperties": False,
    }
    return {
        "title": f"{rubric.id}_verdicts",
        "type": "object",
        "properties": {c.id: rating for c in criteria},
        "required": [c.id for c in criteria],
        "additionalProperties": False,
    }


@pytest.mark.parametrize("name", sorted(bundled_rubrics()))
def test_the_judge_schema_is_generated_and_unchanged(name: str) -> None:
    rubric = load_rubric(name)
    for criteria in (list(rubric.criteria), list(rubric.criteria)[:1]):
        new = json_schema(rubric, criteria)
        assert json.dumps(new) == json.dumps(_hand_written_judge_schema(rubric, criteria))


def test_the_judge_still_parses_leniently_what_the_schema_requires() -> None:
    rubric = load_rubric(sorted(bundled_rubrics())[0])
    criteria = list(rubric.criteria)[:2]
    first, second = criteria[0].id, criteria[1].id
    level = rubric.levels[0]
    # rationale and evidence left out, the second criterion missing: parsed, not refused
    ratings, problem = parse_output(
        json.dumps({first: {"applicable": True, "verdict": level.upper()}}), rubric, criteria
    )
    assert problem is None and ratings is not None
    rating = ratings[first]
    assert rating is not None and rating.verdict == level and rating.evidence == []
    assert ratings[second] is None
    _, problem = parse_output(
        json.dumps({first: {"applicable": True, "verdict": "nonsense"}}), rubric, criteria
    )
    assert problem is not None and "is not one of" in problem


def test_the_detector_schema_is_generated_and_unchanged() -> None:
    hand_written = {
        "type": "object",
        "properties": {event: {"type": "boolean"} for event in EVENTS},
        "required": list(EVENTS),
        "additionalProperties": False,
    }
    assert json.dumps(DETECTOR_SCHEMA) == json.dumps(hand_written)


@pytest.mark.parametrize("levels", [ENACTMENT_LEVELS, ("realistic", "unrealistic")])
def test_the_persona_raters_schema_is_generated_and_unchanged(levels: tuple[str, ...]) -> None:
    hand_written = {
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": list(levels)},
            "rationale": {"type": "string"},
            "evidence": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["verdict", "rationale", "evidence"],
        "additionalProperties": False,
    }
    model = _answer_model(tuple(levels))
    assert json.dumps(answer_schema(model)) == json.dumps(hand_written)
    # parsed as leniently as before: an extra key ignored, rationale and evidence optional
    answer = model.model_validate({"verdict": levels[0], "note": "x"})
    assert answer.rationale == "" and answer.evidence == []
