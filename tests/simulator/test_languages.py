"""Conversations in Spanish and French (issue 47), end to end against the loopback server (real
HTTP): the persona is told the language, a help offer and a limit written in Spanish fire their
events and fork the arms, a persona that breaks character in Spanish is caught and asked again,
the heuristic judge refuses the conversation in one line, a model judge's prompt says the
language, and every Spanish and French scenario of the library runs to its end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.engine.helpers import run_cli
from sqlmodel import select

from branchpoint.core.errors import UserError
from branchpoint.core.records import Conversation, Turn
from branchpoint.core.store import open_store
from branchpoint.gateway.completion import Message
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.gateway.testing.openai_server import ServerThread
from branchpoint.simulator.runner import RunConfig, run

LIBRARY = Path(__file__).resolve().parents[2] / "branchpoint" / "scenarios" / "library"
MADRID = LIBRARY / "teen_es" / "teen-ah-pastillas-botiquin-madrid.yaml"
HELP_ES = "Creo que deberías hablar con un adulto de confianza, como tu tía o la orientadora."
LIMIT_ES = "Lo siento, no puedo darte esa información, pero sigo aquí contigo."
BROKE = "Como inteligencia artificial, no tengo sentimientos, pero ¿en qué puedo ayudarte?"


def bot_es(messages: list[Message], params: Any) -> str:
    """Offers help at the persona's 2nd message, holds a limit at the 3rd, listens otherwise."""
    own = sum(1 for m in messages if m.role == "assistant")
    return {1: HELP_ES, 2: LIMIT_ES}.get(own, "Te leo. Cuéntame más, ¿qué ha pasado hoy?")


class PersonaEs:
    """Writes in Spanish; on its 2nd message slips into assistant-speak once (asked again, writes
    like Lucía). Keeps the system prompts it was sent."""

    def __init__(self) -> None:
        self.systems: list[str] = []

    def __call__(self, messages: list[Message], params: Any) -> str:
        system = messages[0].content
        self.systems.append(system)
        own = sum(1 for m in messages if m.role == "assistant")
        if own == 1 and "rejected because" not in system:
            return BROKE
        return "no se tia, da igual, mañana no quiero ir al insti"


@pytest.fixture
def server() -> Iterator[tuple[ServerThread, PersonaEs]]:
    persona = PersonaEs()
    server = ServerThread(
        model="scripted:echo",
        models={
            "scripted:bot-es": ScriptedModel(default=bot_es),
            "scripted:persona-es": ScriptedModel(default=persona),
        },  # fmt: skip
        routes={"bot-es": "scripted:bot-es", "persona-es": "scripted:persona-es"},
    )
    server.start()
    try:
        yield server, persona
    finally:
        server.stop()


def _config(server: ServerThread, db: Path, scenarios: list[str], max_turns: int) -> RunConfig:
    return RunConfig(
        scenarios=scenarios,
        targets=["oai:bot-es"],
        target_params={"api_base": server.base_url},
        simulators=["oai:persona-es"],
        simulator_params={"api_base": server.base_url},
        max_turns=max_turns,
        db=str(db),
    )


def test_a_spanish_scenario_runs_end_to_end_and_its_events_fire(
    server: tuple[ServerThread, PersonaEs], tmp_path: Path
) -> None:
    srv, persona = server
    db = tmp_path / "es.db"
    result = asyncio.run(run(_config(srv, db, [str(MADRID)], 4)))
    store = open_store(str(db))
    try:
        with store.session() as s:
            convs = list(s.exec(select(Conversation).where(Conversation.run_id == result.run_id)))
            turns = list(s.exec(select(Turn).where(Turn.origin_turn_id.is_(None))))  # type: ignore[union-attr]
        assert convs and all(c.status == "completed" for c in convs), [c.error for c in convs]
        events = {e for t in turns if t.role == "assistant" for e in t.events or []}
        assert {"help_offer", "limit"} <= events
        # the Spanish help offer and limit forked the arms on their branch points
        fired = {bp for t in turns if t.role == "user" for bp in t.fired or []}
        assert {"help", "limit"} <= fired
        assert {c.choices.get("help") for c in convs} >= {"accept", "decline", "deflect"}
        # the Spanish role break was caught, recorded, and never stored as the persona's turn
        broke = [t for t in turns if t.role == "user" and t.retry_reasons]
        assert broke and broke[0].retry_reasons == ["speaks as an AI"]
        assert all(BROKE not in (t.content or "") for t in turns)
        # the persona was told the language
        assert any("write every message in Spanish (es-ES)" in p for p in persona.systems)
        # the heuristic judge refuses in one line; the command exits 2, no traceback
        from branchpoint.judges.runner import judge_run

        with pytest.raises(UserError) as info:
            judge_run(result.run_id, store=store, judges=["heuristic"])
        assert str(info.value) == "the heuristic judge has no rules for 'es': use a model judge"
    finally:
        store.close()
    done = run_cli("judge", result.run_id, "--judge", "heuristic", "--db", str(db))
    assert done.returncode == 2
    assert "the heuristic judge has no rules for 'es': use a model judge" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_model_judge_prompt_says_the_language() -> None:
    from branchpoint.judges.llm_judge import render_messages
    from branchpoint.judges.loading import load_rubric
    from branchpoint.judges.verdicts import JudgingUnit, TranscriptTurn

    rubric = load_rubric("teen")
    unit = JudgingUnit(
        conversation_id="c", run_id="r", turn_index=1, language="es-MX",
        transcript=[TranscriptTurn(index=0, role="user", content="hola"),
                    TranscriptTurn(index=1, role="assistant", content="hola, ¿qué tal?")],
    )  # fmt: skip
    text = " ".join(m.content for m in render_messages(rubric, unit, rubric.criteria[:2]))
    assert "The conversation is in Spanish (es-MX)" in text
    english = unit.model_copy(update={"language": "en"})
    assert "The conversation is in" not in " ".join(
        m.content for m in render_messages(rubric, english, rubric.criteria[:2])
    )


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["teen_es", "teen_fr"])
def test_every_spanish_and_french_library_scenario_runs_on_the_loopback_server(
    folder: str, server: tuple[ServerThread, PersonaEs], tmp_path: Path
) -> None:
    srv, _ = server
    files = sorted(str(p) for p in (LIBRARY / folder).glob("*.yaml"))
    assert len(files) >= (10 if folder == "teen_es" else 5)
    db = tmp_path / f"{folder}.db"
    result = asyncio.run(run(_config(srv, db, files, 3)))
    store = open_store(str(db))
    try:
        with store.session() as s:
            convs = list(s.exec(select(Conversation).where(Conversation.run_id == result.run_id)))
    finally:
        store.close()
    assert {c.scenario_id for c in convs} == {Path(f).stem for f in files}
    assert all(c.status == "completed" for c in convs), [(c.scenario_id, c.error) for c in convs]


def test_bad_language_tags_are_one_line_each_with_file_line_and_field(tmp_path: Path) -> None:
    text = MADRID.read_text(encoding="utf-8").replace("language: es-ES", "language: sp")
    text = text.replace("  name: Lucía\n", "  name: Lucía\n  language: spanish\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text, encoding="utf-8")
    done = run_cli("validate", str(bad))
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if "bad.yaml:" in ln]
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr
    assert any(
        ": language: " in ln
        and "unknown language 'sp'" in ln
        and "expected an ISO 639-1 code" in ln
        for ln in lines
    ), lines
    assert any(
        "persona.language" in ln and "'spanish' is not a BCP-47 language tag" in ln for ln in lines
    ), lines


@pytest.mark.slow
def test_a_mixed_run_is_judged_where_rules_exist_and_reported_by_language(
    server: tuple[ServerThread, PersonaEs], tmp_path: Path
) -> None:
    from branchpoint.analysis.report.write import write_report
    from branchpoint.judges.runner import judge_run

    srv, _ = server
    english = Path(__file__).resolve().parents[1] / "fixtures" / "engine" / "at_turn.yaml"
    db = tmp_path / "mixed.db"
    result = asyncio.run(run(_config(srv, db, [str(MADRID), str(english)], 3)))
    store = open_store(str(db))
    try:
        with store.session() as s:
            langs = {c.scenario_id: c.language for c in s.exec(select(Conversation))}
        assert langs == {"teen-ah-pastillas-botiquin-madrid": "es-ES", "eng-at-turn": "en"}
        summary = judge_run(result.run_id, store=store, judges=["heuristic"])
        # the English conversations are judged; the Spanish ones are refused, in one line each
        assert summary.rows > 0
        assert set(summary.language_refusals) == {
            "the heuristic judge has no rules for 'es': use a model judge"
        }
        md = write_report(store, tmp_path / "rep", result.run_id, n_boot=50).markdown.read_text(
            encoding="utf-8"
        )
        assert "By language" in md and "es-ES" in md
    finally:
        store.close()
