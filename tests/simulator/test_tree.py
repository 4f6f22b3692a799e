"""The tree's pure parts: stage advance, which branch points fire, seeds, grouping, state rebuild."""

from __future__ import annotations

from pathlib import Path

from fixtures.engine.helpers import conversations, run_engine, turns_of

from branchpoint.scenarios.loader import load_scenarios
from branchpoint.scenarios.variants import expand, render_opening
from branchpoint.simulator.graph import advance_stage, derive_seed, fired_next, initial_state
from branchpoint.simulator.plan import Arm, TreeSpec, conversation_id
from branchpoint.simulator.tree import initial_groups, restore_state

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "engine"


def _scenario(name: str):  # type: ignore[no-untyped-def]
    (s,), errors = load_scenarios([FIX / name])
    assert not errors
    return s


def _spec(scenario, fork="shared"):  # type: ignore[no-untyped-def]
    from branchpoint.gateway.completion import GenParams

    arms = [
        Arm(v, v.id, dict(v.choices), conversation_id("r", v.id, "t", "none", 0), i)
        for i, v in enumerate(expand(scenario))
    ]
    return TreeSpec(
        scenario=scenario,
        scenario_hash="h",
        scenario_path=None,
        arms=arms,
        target="t",
        target_params=GenParams(),
        condition="none",
        system_prompt=None,
        replicate=0,
        seed=0,
        fork=fork,
        max_turns=scenario.max_turns,
    )


def test_stages_advance_after_until_turn() -> None:
    s = _scenario("at_turn.yaml")  # start until 2, middle until 4, late
    assert [advance_stage(s, 0, e) for e in range(1, 7)] == [0, 0, 1, 1, 2, 2]
    assert advance_stage(s, 2, 1) == 2  # never moves back (a goto_stage jump holds)


def test_fired_next_at_turn_and_on_event() -> None:
    at = _scenario("at_turn.yaml")
    state = initial_state()
    state.update(exchange=2, history=[{"role": "assistant", "content": "x", "events": []}])
    assert fired_next(at, state) == (["disclosure"], 1)
    state.update(exchange=3)
    assert fired_next(at, state)[0] == []

    ev = _scenario("on_event.yaml")
    state = initial_state()
    state.update(
        exchange=4,
        stage=2,
        history=[{"role": "assistant", "content": "x", "events": ["limit", "help_offer"]}],
    )
    assert sorted(fired_next(ev, state)[0]) == ["help", "limit"]
    state.update(history=[{"role": "assistant", "content": "x", "events": ["crisis_resource"]}])
    assert fired_next(ev, state)[0] == []


def test_seeds_are_stable_and_distinct() -> None:
    assert derive_seed(0, 3, "persona") == derive_seed(0, 3, "persona")
    seeds = {
        derive_seed(r, i, role)
        for r in range(3)
        for i in range(20)
        for role in ("persona", "target")
    }
    assert len(seeds) == 120


def test_conversation_ids_are_deterministic_and_distinct() -> None:
    a = conversation_id("run", "v1", "embedded", "none", 0)
    assert a == conversation_id("run", "v1", "embedded", "none", 0)
    others = [
        conversation_id("run2", "v1", "embedded", "none", 0),
        conversation_id("run", "v2", "embedded", "none", 0),
        conversation_id("run", "v1", "hf:x", "none", 0),
        conversation_id("run", "v1", "embedded", "teen_aware", 0),
        conversation_id("run", "v1", "embedded", "none", 1),
    ]
    assert len({a, *others}) == 6


def test_initial_groups_shared_independent_and_by_opening(tmp_path) -> None:
    s = _scenario("on_event.yaml")
    spec = _spec(s)
    groups = initial_groups(spec, spec.arms, lambda arm: render_opening(s, arm.variant))
    assert [len(g) for g in groups] == [3] and groups[0][0].variant.is_baseline
    spec_i = _spec(s, fork="independent")
    assert [len(g) for g in initial_groups(spec_i, spec_i.arms, lambda arm: "same")] == [1, 1, 1]
    by_text = initial_groups(spec, spec.arms, lambda arm: "a" if arm.order == 1 else "b")
    assert sorted(len(g) for g in by_text) == [1, 2]


def test_restore_state_rebuilds_what_the_graph_had(store) -> None:
    result, _ = run_engine(store, FIX / "on_event.yaml")
    s = _scenario("on_event.yaml")
    spec = _spec(s)
    conv = next(c for c in conversations(store, result.run_id) if c.choices["help"] == "decline")
    turns = turns_of(store, conv.id)
    full = restore_state(spec, turns)
    assert (
        full["exchange"] == 6
        and full["next"] == "route"
        and full["branch_state"] == {"help": "decline"}
    )
    assert s.stages[full["stage"]].id == "after" and len(full["history"]) == 12
    assert full["history"][0]["key"] == turns[0].origin_turn_id  # shared turns keep the leader's id
    assert full["history"][-1]["key"] == turns[-1].id
    mid = restore_state(spec, turns[:7])  # ends on a persona turn: the reply is what is missing
    assert mid["next"] == "target" and mid["exchange"] == 4 and not mid["persona_ended"]
    assert restore_state(spec, [])["next"] == "route"
