"""The bundled library meets what issues 2 and 12 promise of it, checked through the real loader."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from branchpoint.scenarios import expand, expand_by_cue, load_conditions, load_scenarios

LIBRARY = Path(__file__).resolve().parents[2] / "branchpoint" / "scenarios" / "library"
RISK_AREAS = {"acute_harm", "medical_boundaries", "relational_safety"}


@pytest.fixture(scope="module")
def library():
    scenarios, errors = load_scenarios(LIBRARY)
    assert [str(e) for e in errors] == []
    return scenarios


def test_teen_seeds_span_the_three_risk_areas(library):
    teen = [s for s in library if s.risk_area in RISK_AREAS]
    # issue 12: the study-scale set (was >= 12 seeds, >= 3 per area, before the library grew)
    assert len(teen) >= 30
    by_area = Counter(s.risk_area for s in teen)
    assert set(by_area) == RISK_AREAS and min(by_area.values()) >= 10
    assert all(13 <= s.persona.age <= 17 for s in teen)
    assert {s.persona.age for s in teen} == {13, 14, 15, 16, 17}
    assert len({s.persona.gender for s in teen}) >= 3
    # countries are the last tag of each seed: no country carries more than a few seeds
    countries = Counter(s.tags[-1] for s in teen)
    assert len(countries) >= 20 and max(countries.values()) <= 3
    assert all(s.rubric == "teen" for s in teen)


def test_teen_seeds_average_six_arms_with_three_way_help_and_reframed_limits(library):
    teen = [s for s in library if s.risk_area in RISK_AREAS]
    arms = [len(expand(s)) for s in teen]
    assert sum(arms) / len(arms) >= 6, arms
    for s in teen:
        kinds = {bp.kind: bp for bp in s.branch_points}
        assert set(kinds) == {"disclosure", "help_offer", "limit_pushback"} or s.id == (
            "teen-mb-be-my-therapist"  # a boundaries seed with no disclosure to make
        ), s.id
        assert set(kinds["help_offer"].options) == {"accept", "decline", "deflect"}, s.id
        limit = set(kinds["limit_pushback"].options)
        assert {"accept_limit", "push_back"} < limit, s.id
        assert limit - {"accept_limit", "push_back"} <= {"reframe_fiction", "reframe_friend"}
    # no seed is another one with names swapped: openings and stage texts are all distinct
    assert len({s.opening for s in teen}) == len(teen)
    stage_texts = [st.instructions for s in teen for st in s.stages]
    assert len(set(stage_texts)) == len(stage_texts)


def test_multi_turn_ed_forum_user_seeds(library):
    ed = [s for s in library if s.risk_area == "eating_disorders" and s.profile is None]
    assert len(ed) >= 10
    rubric_ed = [
        "ed_diet_guidance",
        "ed_encouraging_disordered_behaviour",
        "ed_symptom_concealment",
        "ed_thinspiration",
        "ed_negative_self_beliefs",
        "ed_body_focus",
        "ed_narrow_views",
    ]
    for s in ed:
        assert s.rubric == "ed" and s.criteria == rubric_ed, s.id
        assert s.max_turns == 20 and len(s.stages) >= 3, s.id
        kinds = {bp.kind: bp for bp in s.branch_points}
        assert set(kinds) == {"disclosure", "help_offer", "limit_pushback"}, s.id
        assert {"history", "current"} < set(kinds["disclosure"].options), s.id
        assert set(kinds["help_offer"].options) == {"accept", "decline", "deflect"}, s.id
        assert len(kinds["limit_pushback"].options) >= 4, s.id
        assert kinds["disclosure"].trigger.at_turn is not None
        assert kinds["help_offer"].trigger.on_event == "help_offer"
        assert kinds["limit_pushback"].trigger.on_event == "limit"
        assert len(expand(s)) == 8, s.id
    assert all(s.persona.age >= 18 for s in ed)
    topics = {t for s in ed for t in s.tags}
    for topic in (
        "restriction",
        "compensation",
        "body_checking",
        "goal_weights",
        "relapse",
        "pro_ed",
    ):
        assert topic in topics, topic
    # the single-turn forum set stays the ED study's design
    single = [s for s in library if s.profile is not None]
    assert all(s.max_turns == 1 and s.branch_points == [] and s.rubric == "ed" for s in single)


@pytest.mark.parametrize("kind_min", [2])
def test_each_teen_seed_has_two_branch_kinds_and_three_variants(library, kind_min):
    for s in (s for s in library if s.risk_area in RISK_AREAS):
        kinds = {bp.kind for bp in s.branch_points} & {"disclosure", "help_offer", "limit_pushback"}
        assert len(kinds) >= kind_min, s.id
        variants = expand(s)
        assert len(variants) >= 3, s.id
        # one_at_a_time: every non-baseline variant deviates at exactly one branch point
        assert sorted(len(v.deviations) for v in variants)[0] == 0
        assert all(len(v.deviations) <= 1 for v in variants), s.id


def test_each_ed_question_expands_to_17_conditions_per_cue_setting(library):
    ed = [s for s in library if s.profile is not None]
    assert len(ed) >= 20
    for s in ed:
        by_cue = expand_by_cue(s)
        assert set(by_cue) == {False, True}, s.id
        for cue, variants in by_cue.items():
            assert len(variants) == 17, (s.id, cue)
            with_bio = [v for v in variants if v.profile]
            assert len(with_bio) == 16
            assert all(len(v.profile) == 2 for v in with_bio)
            # the 16 bios are distinct matched profiles
            assert len({tuple(sorted(v.profile.items())) for v in with_bio}) == 16


def test_every_bundled_file_warns_and_disclaims_validation(library):
    for s in library:
        assert s.content_warning.strip(), s.id
        assert "not clinically validated" in (s.notes or "").lower(), s.id
    readme = (LIBRARY / "README.md").read_text(encoding="utf-8").lower()
    assert "content warning" in readme and "not clinically validated" in readme


def test_prompt_conditions_none_and_teen_aware():
    conditions = load_conditions()
    assert conditions["none"].system_prompt is None
    teen_aware = conditions["teen_aware"].system_prompt or ""
    # crisis resources come from configuration, rendered into the prompt
    assert "988" in teen_aware or "helpline" in teen_aware.lower()
