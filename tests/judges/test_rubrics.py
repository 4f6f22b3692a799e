"""Rubric format: the bundled rubrics validate, malformed rubrics fail with exact one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from branchpoint.judges.loading import bundled_rubrics, load_rubric, load_rubric_file
from branchpoint.judges.rubric import SCALES, Rubric

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "tests" / "fixtures" / "bad_rubrics"

TEEN_IDS = {
    "acute_harm": [
        "indirect_suicide_risk",
        "self_harm_response",
        "crisis_resources",
        "no_method_information",
        "safety_planning",
        "abuse_safeguarding",
        "dangerous_activities",
        "no_secrecy_from_caregivers",
        "follow_up_on_risk",
    ],
    "medical_boundaries": [
        "no_diagnosis",
        "no_medication_advice",
        "substance_misuse",
        "eating_disorder_care",
        "therapeutic_boundaries",
        "no_harmful_validation",
    ],
    "relational_safety": [
        "emotional_dependence",
        "ai_identity",
        "romantic_roleplay",
        "real_world_support",
        "limit_under_pushback",
        "age_appropriate_tone",
        "privacy_and_personal_info",
    ],
}
ED_IDS = [
    "ed_diet_guidance",
    "ed_encouraging_disordered_behaviour",
    "ed_symptom_concealment",
    "ed_thinspiration",
    "ed_negative_self_beliefs",
    "ed_body_focus",
    "ed_narrow_views",
]

# file -> the exact error lines (after the path prefix) that the loader must give.
EXPECTED = {
    "01_unknown_key_typo.yaml": [
        "8:5: criteria[0].applies_when: required field is missing (expected non-empty text)",
        "12:5: criteria[0].applies_wen: unknown key 'applies_wen' (did you mean 'applies_when'?)",
    ],
    "02_missing_anchor.yaml": [
        "13:5: criteria[0].anchors: missing anchor for level 'partial' (expected one text for each of: fail, partial, pass)",
    ],
    "03_unknown_anchor_level.yaml": [
        "13:5: criteria[0].anchors: unknown level 'maybe' (expected one of: fail, partial, pass)",
    ],
    "04_bad_regex.yaml": [
        "17:11: criteria[0].patterns.pass_if_any[1]: regex '(crisis line' does not compile: missing ), "
        "unterminated subpattern at position 0 (expected a Python regex)",
    ],
    "05_unknown_scale.yaml": [
        "6:8: scale: 'pass_fail' is not allowed (expected 'pass_partial_fail' or 'risk_levels')",
    ],
    "06_duplicate_criterion.yaml": [
        "14:9: criteria[1].id: criterion id 'crisis_resources' appears twice (expected unique ids; first is criteria[0])",
    ],
    "07_otherwise_pass.yaml": [
        "16:18: criteria[0].patterns.otherwise: may not be the best level 'pass': a heuristic never passes a reply "
        "for lack of evidence (expected a worse level, or pass_if_any patterns)",
    ],
    "08_refusal_policy_on_pass_fail.yaml": [
        "7:17: refusal_policy: count_as_low applies only to the risk_levels scale (expected exclude, or no refusal_policy)",
    ],
    "09_score_rule_mismatch.yaml": [
        "7:13: score_rule: safety_score does not fit the pass_partial_fail scale (expected failure_rate)",
    ],
    "10_level_pattern_off_scale.yaml": [
        "15:7: criteria[0].patterns.pass_if_any: level 'pass' is not on the risk_levels scale "
        "(expected one of: high_if_any, medium_if_any, low_if_any, refusal_if_any, applies_if_any)",
    ],
    "11_bad_yaml.yaml": [
        "12:1: <yaml>: while scanning a quoted scalar: found unexpected end of stream (expected valid YAML)"
    ],
    "12_no_criteria.yaml": ["7:1: criteria: has 0 entries (expected at least 1)"],
    "13_bad_ids_and_missing_fields.yaml": [
        "2:1: title: required field is missing (expected non-empty text)",
        "2:5: id: 'Tiny Rubric' is not a valid id (expected an id: lowercase letters, digits, '-' or '_', "
        "starting with a letter or digit)",
        "6:8: scope: 'per_message' is not allowed (expected 'per_turn' or 'conversation')",
        "11:17: criteria[0].definition: is empty (expected non-empty text)",
    ],
}


def test_teen_rubric_has_the_22_criteria_in_three_risk_areas() -> None:
    rubric = load_rubric("teen")
    assert (
        rubric.scale == "pass_partial_fail"
        and rubric.scope == "per_turn"
        and rubric.rule == "failure_rate"
    )
    by_area: dict[str, list[str]] = {}
    for c in rubric.criteria:
        by_area.setdefault(c.risk_area, []).append(c.id)
        assert set(c.anchors) == {"pass", "partial", "fail"} and c.applies_when.strip()
    assert by_area == TEEN_IDS
    assert len(rubric.criteria) == 22
    assert "not clinically validated" in (rubric.notes or "").lower()
    assert "crisis_resources.yaml" in (rubric.notes or "")
    assert rubric.content_warning.strip()


def test_ed_rubric_has_the_seven_dimensions_on_the_risk_scale() -> None:
    rubric = load_rubric("ed")
    assert [c.id for c in rubric.criteria] == ED_IDS
    assert (
        rubric.scale == "risk_levels"
        and rubric.rule == "safety_score"
        and rubric.scope == "per_turn"
    )
    assert rubric.refusal_policy == "exclude"
    for c in rubric.criteria:
        assert set(c.anchors) == {"high", "medium", "low", "refusal"}
    assert "not clinically validated" in (rubric.notes or "").lower()
    # Row scores follow the ED formula's values; a refusal is left out under "exclude".
    assert [rubric.score(v) for v in ("low", "medium", "high", "refusal", "error")] == [
        2,
        1,
        0,
        None,
        None,
    ]


def test_every_heuristic_pattern_compiles_and_no_rubric_defaults_to_pass() -> None:
    for name, path in bundled_rubrics().items():
        rubric, errors = load_rubric_file(path)
        assert rubric is not None, [str(e) for e in errors]
        best = rubric.scale_def.best
        for c in rubric.criteria:
            if c.patterns is not None:
                assert c.patterns.otherwise != best, (name, c.id)


def test_bundled_scenarios_name_only_criteria_of_a_bundled_rubric() -> None:
    from branchpoint.scenarios.loader import load_scenarios

    scenarios, errors = load_scenarios(REPO / "branchpoint" / "scenarios" / "library")
    assert not errors, [str(e) for e in errors][:3]
    known = {c.id for name in ("teen", "ed") for c in load_rubric(name).criteria}
    named = {cid for s in scenarios for cid in s.criteria}
    assert named, "the library should list criteria"
    assert named <= known, sorted(named - known)


def test_rubric_hash_is_canonical_and_changes_with_content(tmp_path: Path) -> None:
    from ruamel.yaml import YAML

    rubric = load_rubric("teen")
    # Same content written another way (JSON-style YAML, keys reordered): same hash.
    data = rubric.model_dump(mode="json", exclude_none=True)
    reordered = dict(reversed(list(data.items())))
    path = tmp_path / "teen-copy.yaml"
    YAML(typ="safe").dump(reordered, path)
    copy, errors = load_rubric_file(path)
    assert copy is not None, [str(e) for e in errors]
    assert copy.rubric_hash() == rubric.rubric_hash()
    changed = rubric.model_copy(update={"version": "1.1"})
    assert changed.rubric_hash() != rubric.rubric_hash()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_malformed_rubric_gives_exact_error_lines(name: str) -> None:
    path = BAD / name
    rubric, errors = load_rubric_file(path)
    assert rubric is None
    assert [str(e) for e in errors] == [f"{path}:{line}" for line in EXPECTED[name]]


def test_every_bad_rubric_fixture_has_expectations() -> None:
    assert sorted(p.name for p in BAD.glob("*.yaml")) == sorted(EXPECTED)
    assert len(EXPECTED) >= 8


def test_load_rubric_raises_a_one_line_user_error() -> None:
    from branchpoint.core.errors import UserError

    with pytest.raises(UserError) as info:
        load_rubric(BAD / "02_missing_anchor.yaml")
    assert "\n" not in str(info.value) and "missing anchor for level 'partial'" in str(info.value)
    with pytest.raises(UserError, match="bundled: ed, reasoning, teen"):
        load_rubric("no-such-rubric")


def test_validate_command_accepts_rubrics_and_reports_bad_ones() -> None:
    import subprocess
    import sys

    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "branchpoint.tui.cli",
            "validate",
            "branchpoint/judges/rubrics/teen.yaml",
            "branchpoint/judges/rubrics/ed.yaml",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "branchpoint.tui.cli",
            "validate",
            str(BAD / "06_duplicate_criterion.yaml"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0
    assert (
        "06_duplicate_criterion.yaml:14:9: criteria[1].id: criterion id 'crisis_resources' appears twice"
        in (bad.stdout + bad.stderr)
    )
    assert "Traceback" not in bad.stdout + bad.stderr


def test_scales_are_ordered_worst_first() -> None:
    assert SCALES["pass_partial_fail"].levels == ("fail", "partial", "pass")
    assert SCALES["risk_levels"].levels == ("high", "medium", "low")
    assert SCALES["risk_levels"].extra_levels == ("refusal",)
    assert Rubric.model_fields["scope"].default == "per_turn"
