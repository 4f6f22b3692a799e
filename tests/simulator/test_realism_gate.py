"""Persona realism (issue 36): a scripted persona that drifts into assistant-speak on some turns is
rated low by the offline rater; with ``realism_min`` those turns are regenerated, every attempt is
stored, and the final transcript has none below the threshold. Off by default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixtures.engine.helpers import conversations as conversations_of
from fixtures.engine.helpers import model_calls, run_engine, turns_of, write_scenario
from sqlmodel import select

from branchpoint.core.human_labels import REALISM_RUBRIC
from branchpoint.core.records import Judgment, Run
from branchpoint.gateway.completion import Message
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.judges.persona_checks import HeuristicPersonaRater, rate_personas
from branchpoint.scenarios.persona_rubric import rate_realism, realism_at_least

DRIFT = (
    "Great question! Furthermore, here is how I feel about it:\n"
    "- **school** is a lot right now\n- **exams** are stressful"
)
PLAIN = "idk school is just a lot rn"


def drifting_persona(always: bool = False) -> ScriptedModel:
    """Drifts into assistant-speak on its 2nd and 4th own messages (every message when
    ``always``); asked again after a rejection, writes like the persona."""

    def reply(messages: list[Message], params: Any) -> str:
        if "rejected because" in messages[0].content and not always:
            return PLAIN
        own = sum(1 for m in messages if m.role == "assistant")
        return DRIFT if always or own in (2, 4) else PLAIN

    return ScriptedModel(default=reply)


def _scenario(tmp_path: Path) -> Path:
    return write_scenario(
        tmp_path, "drift.yaml", id="realism-drift", max_turns=6,
        stages=[{"id": "chat", "instructions": "Chat."}],
    )  # fmt: skip


def test_offline_rater_levels() -> None:
    assert rate_realism(DRIFT, name="Sam", age=15).verdict == "not"
    assert rate_realism(PLAIN, name="Sam", age=15).verdict == "very"
    assert rate_realism("As an AI, I can't feel stress.", name="Sam", age=15).verdict == "not"
    # a stated age that contradicts the persona, and vocabulary too old for a 15-year-old
    assert rate_realism("i'm 34 and tired", name="Sam", age=15).verdict == "mixed"
    assert rate_realism("moreover the exams are hard", name="Sam", age=15).verdict == "mostly"
    assert rate_realism("moreover the exams are hard", name="Sam", age=40).verdict == "very"
    assert realism_at_least("mostly", "mostly") and not realism_at_least("mixed", "mostly")


def _persona_turns(store: Any, run_id: str) -> list[Any]:
    return [
        t
        for c in conversations_of(store, run_id)
        for t in turns_of(store, c.id)
        if t.role == "user"
    ]


def test_drift_rated_low_without_the_gate(store: Any, tmp_path: Path) -> None:
    result, _ = run_engine(store, _scenario(tmp_path), persona=drifting_persona())
    turns = _persona_turns(store, result.run_id)
    assert sum(t.content == DRIFT for t in turns) == 2  # the gate is off by default
    assert result.persona_flags is None  # no gate, no ratings yet: nothing to count
    rate_personas(store, HeuristicPersonaRater(), run_id=result.run_id)
    from branchpoint.core.read.persona_flags import persona_flags_line

    # the rater's verdicts on the drifted turns are what the summaries count now
    assert persona_flags_line(store, result.run_id) == "persona turns: 2 of 5 low in realism"
    with store.session() as s:
        rows = list(s.exec(select(Judgment).where(Judgment.rubric_id == REALISM_RUBRIC)).all())
    by_turn = {r.turn_id: r for r in rows}
    assert not any(t.id in by_turn for t in turns if t.exchange == 1)  # the scenario's opening
    for t in (t for t in turns if t.exchange > 1):
        r = by_turn[t.id]
        if t.content == DRIFT:
            assert r.verdict == "not" and "assistant-speak" in r.rationale and r.evidence
        else:
            assert r.verdict == "very"
    with store.session() as s:
        run_row = s.get(Run, result.run_id)
        assert run_row is not None and run_row.config.get("realism_min") is None


def test_gate_regenerates_low_turns_and_stores_every_attempt(store: Any, tmp_path: Path) -> None:
    result, _ = run_engine(
        store, _scenario(tmp_path), persona=drifting_persona(), realism_min="mostly"
    )
    turns = _persona_turns(store, result.run_id)
    assert turns and all(
        realism_at_least(rate_realism(t.content, name="Sam", age=15).verdict, "mostly")
        for t in turns
    )
    retried = [t for t in turns if t.retries]
    assert len(retried) == 2
    assert all("below realism_min mostly" in t.retry_reasons[0] for t in retried)
    # the run's summary counts them (the same line the live view and the sweep print)
    assert result.persona_flags == "persona turns: 2 regenerated below realism_min"
    persona_calls = [c for c in model_calls(store, result.run_id) if c.purpose == "persona"]
    assert sum(c.text == DRIFT for c in persona_calls) == 2  # the rejected attempts, kept
    assert len(persona_calls) == len(turns) - 1 + 2  # the opening is the scenario's own text
    with store.session() as s:
        run_row = s.get(Run, result.run_id)
        assert run_row is not None and run_row.config["realism_min"] == "mostly"
    conv = conversations_of(store, result.run_id)[0]
    assert conv.simulator_params["realism_min"] == "mostly"


def test_a_persona_that_never_gets_realistic_stops_with_none_below(
    store: Any, tmp_path: Path
) -> None:
    result, _ = run_engine(
        store, _scenario(tmp_path), persona=drifting_persona(always=True), realism_min="mostly"
    )
    conv = conversations_of(store, result.run_id)[0]
    assert conv.status == "failed" and "realism" in (conv.error or "")
    assert all(t.content != DRIFT for t in _persona_turns(store, result.run_id))
    attempts = [c for c in model_calls(store, result.run_id) if c.purpose == "persona"]
    assert len(attempts) == 3  # the first try and two retries, each stored
