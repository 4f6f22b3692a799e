"""Replay (issue 47): ``branchpoint replay CONV --at TURN --message TEXT --continue N`` forks a
stored conversation at a persona turn against the same target over real HTTP (the loopback
server), goes on with the persona, stores the branch with its provenance in the run's replay
run, judges it like the rest, pairs it with its original in compare, and keeps it out of the
designed contrasts (the report lists it apart)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.engine.helpers import run_cli

from branchpoint.core.errors import UserError
from branchpoint.core.read import turns_by_conversation
from branchpoint.core.read.browse import shared_prefix, tree_arms
from branchpoint.core.records import Conversation, Run
from branchpoint.core.store import open_store
from branchpoint.gateway.testing.openai_server import ServerThread
from branchpoint.simulator.replay import areplay
from branchpoint.simulator.runner import RunConfig, run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "engine"
MESSAGE = "WHAT IF i told you i have a plan"


@pytest.fixture
def server() -> Iterator[ServerThread]:
    server = ServerThread(model="scripted:echo")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def stored(server: ServerThread, tmp_path: Path) -> tuple[str, str]:
    db = str(tmp_path / "r.db")
    scenario = tmp_path / "at_turn.yaml"  # a copy: one test edits it
    scenario.write_text((FIX / "at_turn.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    config = RunConfig(
        scenarios=[str(scenario)],
        targets=["oai:echo"],
        target_params={"api_base": server.base_url, "temperature": 0.3},
        simulators=["oai:echo"],
        simulator_params={"api_base": server.base_url},
        conditions=["none"],
        max_turns=4,
        db=db,
    )
    result = asyncio.run(run(config))
    return db, result.run_id


def _convs(db: str, run_id: str) -> list[Conversation]:
    store = open_store(db)
    try:
        with store.session() as s:
            from sqlmodel import select

            return list(s.exec(select(Conversation).where(Conversation.run_id == run_id)))
    finally:
        store.close()


def test_replay_forks_at_a_persona_turn_with_a_live_call_and_provenance(
    server: ServerThread, stored: tuple[str, str]
) -> None:
    db, run_id = stored
    original = next(c for c in _convs(db, run_id) if c.parent_id is None)
    assert server.server is not None
    before = server.server.requests
    store = open_store(db)
    try:
        result = asyncio.run(
            areplay(store, original.id, 2, MESSAGE, continue_n=1, annotator="clin1")
        )
        assert result.status == "completed", result
        # the person's message and the chatbot's reply to it (a live call: the echo server
        # echoes it), then one persona message and one more reply
        assert server.server.requests - before == 3
        turns = {c: sorted(ts, key=lambda t: t.index) for c, ts in
                 turns_by_conversation(store, [original.id, result.conversation_id]).items()}  # fmt: skip
        mine, theirs = turns[result.conversation_id], turns[original.id]
        assert [t.index for t in mine] == [0, 1, 2, 3, 4, 5]
        assert mine[2].content == MESSAGE and mine[2].model == "person:clin1"
        assert mine[3].role == "assistant" and mine[3].content == MESSAGE
        assert mine[3].content != theirs[3].content
        # the prefix is the original's turns (one observation), the fork is at turn 2
        assert [t.origin_turn_id for t in mine[:2]] == [t.id for t in theirs[:2]]
        assert shared_prefix([mine, theirs]) == 2
        with store.session() as s:
            conv = s.get(Conversation, result.conversation_id)
            replay_run = s.get(Run, result.run_id)
        assert conv is not None and replay_run is not None
        assert conv.origin == "replay" and conv.parent_id == original.id and conv.fork_turn == 2
        assert conv.replay == {
            "parent_conversation_id": original.id, "parent_run_id": run_id,
            "parent_turn_id": theirs[2].id, "parent_turn_index": 2, "annotator": "clin1",
            "message_by": "person", "continue": 1,
        }  # fmt: skip
        # same target, params, condition, replicate and seed as the original
        for field in ("target", "target_params", "condition", "simulator", "replicate", "seed",
                      "variant_id", "scenario_hash"):  # fmt: skip
            assert getattr(conv, field) == getattr(original, field), field
        assert replay_run.kind == "replay" and replay_run.config["replay_of"] == run_id
        assert result.run_id == f"{run_id}-replays"
        # compare finds it beside its original
        assert result.conversation_id in {a.id for a in tree_arms(store, original.id)}
    finally:
        store.close()


def test_bad_turns_are_one_line_each(stored: tuple[str, str]) -> None:
    db, run_id = stored
    original = next(c for c in _convs(db, run_id) if c.parent_id is None)
    store = open_store(db)
    try:
        with pytest.raises(
            UserError,
            match=r"--at 1: turn 1 of .* is the chatbot's; --at takes a persona turn \(persona turns: 0, 2, 4, 6; 8 takes over after the last reply\)",
        ):
            asyncio.run(areplay(store, original.id, 1, "x"))
        with pytest.raises(UserError, match=r"--at 40: conversation .* has turns 0 to 7"):
            asyncio.run(areplay(store, original.id, 40, "x"))
        with pytest.raises(UserError, match="--message is empty"):
            asyncio.run(areplay(store, original.id, 2, "  "))
    finally:
        store.close()
    done = run_cli("replay", original.id, "--at", "1", "--message", "x", "--db", db)
    assert done.returncode == 2
    assert "Traceback" not in done.stdout + done.stderr
    assert "is the chatbot's" in done.stderr


@pytest.mark.slow
def test_the_cli_replays_and_says_where_the_branch_is(stored: tuple[str, str]) -> None:
    db, run_id = stored
    original = next(c for c in _convs(db, run_id) if c.parent_id is None)
    done = run_cli(
        "replay", original.id[:8], "--at", "4", "--message", MESSAGE, "--continue", "0",
        "--annotator", "clin2", "--db", db,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"of {original.id} at turn 4: completed (max_turns), 6 turns" in done.stdout
    assert f"branchpoint judge {run_id}-replays" in done.stdout
    (replay,) = _convs(db, f"{run_id}-replays")
    assert replay.replay is not None and replay.replay["annotator"] == "clin2"


@pytest.mark.slow
def test_a_replay_is_judged_listed_apart_and_never_in_a_designed_contrast(
    stored: tuple[str, str], tmp_path: Path
) -> None:
    from sqlmodel import select

    from branchpoint.analysis.report.write import write_report
    from branchpoint.analysis.tables.judgments import resolve_runs
    from branchpoint.core.records import Judgment
    from branchpoint.judges.runner import judge_run

    db, run_id = stored
    original = next(c for c in _convs(db, run_id) if c.parent_id is None)
    store = open_store(db)
    try:
        result = asyncio.run(areplay(store, original.id, 2, MESSAGE, annotator="clin1"))
        judge_run(run_id, store=store, judges=["heuristic"])
        judge_run(result.run_id, store=store, judges=["heuristic"])
        with store.session() as s:
            judged = {
                j.conversation_id
                for j in s.exec(select(Judgment).where(Judgment.judge == "heuristic"))
            }
        assert result.conversation_id in judged and original.id in judged
        # "every run" is every designed run; a replay run named is refused in one line
        assert resolve_runs(store, None) == [run_id]
        with pytest.raises(UserError, match=r"holds replays, which no designed contrast counts"):
            resolve_runs(store, [result.run_id])
        files = write_report(store, tmp_path / "report", run_id, n_boot=50)
        md = files.markdown.read_text(encoding="utf-8")
        assert "Replays (not in any contrast)" in md
        assert result.conversation_id in md and "clin1" in md
        # the designed tables never name it
        designed = md.split("Replays (not in any contrast)")[0]
        assert result.conversation_id not in designed
    finally:
        store.close()


def test_a_scenario_changed_since_the_run_is_refused(
    stored: tuple[str, str], tmp_path: Path
) -> None:
    db, run_id = stored
    original = next(c for c in _convs(db, run_id) if c.parent_id is None)
    path = Path(original.scenario_path or "")
    path.write_text(path.read_text(encoding="utf-8").replace("max_turns: 5", "max_turns: 6"),
                    encoding="utf-8")  # fmt: skip
    store = open_store(db)
    try:
        with pytest.raises(UserError, match="has changed since conversation .* was run"):
            asyncio.run(areplay(store, original.id, 2, MESSAGE))
    finally:
        store.close()


def test_take_over_the_person_keeps_typing_after_the_last_reply(stored: tuple[str, str]) -> None:
    """A replay of a replay, at the turn after its last reply: the person writes the next
    message (take-over); the branch keeps every turn before and stays in the replay run."""
    db, run_id = stored
    original = next(c for c in _convs(db, run_id) if c.parent_id is None)
    store = open_store(db)
    try:
        first = asyncio.run(areplay(store, original.id, 2, MESSAGE, annotator="clin1"))
        assert first.n_turns == 4  # the message and the chatbot's reply
        second = asyncio.run(
            areplay(store, first.conversation_id, 4, "and then what", annotator="clin1")
        )
        assert second.status == "completed" and second.run_id == first.run_id
        turns = sorted(turns_by_conversation(store, [second.conversation_id])[second.conversation_id],
                       key=lambda t: t.index)  # fmt: skip
        assert [t.content for t in turns[2:]] == [
            MESSAGE,
            MESSAGE,
            "and then what",
            "and then what",
        ]
        with store.session() as s:
            conv = s.get(Conversation, second.conversation_id)
        assert conv is not None and conv.parent_id == first.conversation_id
        assert conv.replay is not None and conv.replay["parent_turn_id"] is None
        assert conv.replay["parent_turn_index"] == 4
    finally:
        store.close()
