"""Replay: fork a stored conversation at a persona turn with another message (issue 47).

A clinician reads a transcript and asks "what if she had said this instead?". ``replay`` makes
that branch: a new conversation that shares the original's turns before the persona turn
``at`` (copies, ``origin_turn_id`` naming the originals: one observation, as a designed fork's
shared prefix is), whose turn ``at`` is the person's message, and which then goes on against
the same target, with the same target params, condition, system prompt and seeds (a live call),
the persona carrying on for ``continue_n`` more exchanges under the arm's options.

Provenance: the conversation's ``origin`` is ``replay``, ``parent_id`` the original,
``fork_turn`` the replaced turn, and ``replay`` records the parent turn, the annotator and the
message's author. Replays live in their own run, ``<run>-replays`` (kind ``replay``, its config
the original's with ``replay_of``), so a designed contrast of the original run never counts
them, while ``branchpoint judge <run>-replays`` judges them like any run and the TUI's compare
finds them beside their original (same scenario, target, condition, simulator, replicate).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from branchpoint.core.domain import REPLAY_ORIGIN as REPLAY
from branchpoint.core.domain import replay_run_id
from branchpoint.core.errors import UserError

if TYPE_CHECKING:
    from branchpoint.core.records import Conversation, Turn
    from branchpoint.core.store import Store
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.simulator.plan import RunPlan, TreeSpec

MAX_CONTINUE = 50


class ReplayResult(BaseModel):
    """What a replay made."""

    conversation_id: str
    run_id: str
    parent_id: str
    at: int
    status: str
    stop_reason: str | None = None
    error: str | None = None
    n_turns: int = 0


def _check_turn(conv: Conversation, turns: list[Turn], at: int) -> Turn:
    """The persona turn ``at`` replaces; past the last chatbot turn, a new persona turn (a
    take-over: the person writes the next message, the transcript kept whole)."""
    from branchpoint.core.records import Turn as T

    if not turns:
        raise UserError(f"conversation {conv.id} has no stored turns to replay")
    last = turns[-1]
    if at == last.index + 1 and last.role == "assistant":
        return T(
            id=f"{conv.id}:{at}", conversation_id=conv.id, index=at, exchange=last.exchange + 1,
            role="user", stage=last.stage, branch_state=dict(last.branch_state or {}), fired=[],
        )  # fmt: skip
    persona_turns = [t.index for t in turns if t.role == "user"]
    shown = ", ".join(str(i) for i in persona_turns[:12]) + (
        " ..." if len(persona_turns) > 12 else ""
    )
    if last.role == "assistant":
        shown += f"; {last.index + 1} takes over after the last reply"
    by_index = {t.index: t for t in turns}
    if at not in by_index:
        raise UserError(
            f"--at {at}: conversation {conv.id} has turns 0 to {turns[-1].index} "
            f"(persona turns: {shown})"
        )
    turn = by_index[at]
    if turn.role != "user":
        raise UserError(
            f"--at {at}: turn {at} of {conv.id} is the chatbot's; --at takes a persona turn "
            f"(persona turns: {shown})"
        )
    return turn


def _config_of(run_config: dict[str, Any], conv: Conversation, max_turns: int) -> Any:
    """The original run's config narrowed to ``conv``'s cell, running to ``max_turns``."""
    from branchpoint.simulator.run_config import RunConfig

    known = {k: v for k, v in (run_config or {}).items() if k in RunConfig.model_fields}
    known.update(
        scenarios=[conv.scenario_path] if conv.scenario_path else known.get("scenarios", []),
        targets=[conv.target],
        conditions=[conv.condition],
        simulators=[conv.simulator] if conv.simulator else known.get("simulators", ["embedded"]),
        replicates=conv.replicate + 1,
        variants=[conv.variant_id],
        max_turns=max_turns,
        run_id=None,
        resume=False,
        db=None,
        processes=1,
    )
    return RunConfig.model_validate(known)


def _check_scenario(config: Any, conv: Conversation) -> None:
    """The scenario file still holds the scenario the conversation was run with (its variant
    ids hash it, so a changed file would otherwise be a puzzling "no such variant")."""
    from branchpoint.scenarios.variants import scenario_hash
    from branchpoint.simulator.plan import load

    found = [s for s in load(config.scenarios) if s.id == conv.scenario_id]
    if not found:
        raise UserError(
            f"scenario {conv.scenario_id} is no longer in {', '.join(config.scenarios)}: "
            f"conversation {conv.id} cannot be replayed"
        )
    if scenario_hash(found[0]) != conv.scenario_hash:
        raise UserError(
            f"scenario {conv.scenario_id} ({conv.scenario_path}) has changed since "
            f"conversation {conv.id} was run: a replay would not be of the same scenario "
            "(restore the file, or run the new version)"
        )


def _tree_of(plan: RunPlan, conv: Conversation) -> TreeSpec:
    for tree in plan.trees:
        if tree.replicate == conv.replicate and any(
            a.variant_id == conv.variant_id for a in tree.arms
        ):
            return tree
    raise UserError(f"conversation {conv.id}: its cell is not in its run's config any more")


def replay_id(parent_id: str, at: int, message: str, annotator: str, salt: str) -> str:
    key = "\x1f".join([parent_id, str(at), message, annotator, salt])
    return "r" + hashlib.sha256(key.encode()).hexdigest()[:15]


def _ensure_replay_run(store: Store, original: Any, run_id: str) -> None:
    from branchpoint.core.records import Run, utcnow

    with store.session() as s:
        if s.get(Run, run_id) is not None:
            return
        config = dict(original.config or {}) | {"replay_of": original.id}
        s.add(
            Run(
                id=run_id,
                kind=REPLAY,
                name=f"replays of {original.id}",
                status="completed",
                config=config,
                branchpoint_version=original.branchpoint_version,
                created_at=utcnow(),
                updated_at=utcnow(),
            )
        )
        s.commit()


def _store_branch(
    store: Store,
    conv: Conversation,
    turns: list[Turn],
    turn: Turn,
    *,
    new_id: str,
    run_id: str,
    message: str,
    annotator: str,
    continue_n: int,
) -> None:
    """The replay's conversation row, its copied prefix and the person's message."""
    from branchpoint.core.records import Conversation as Conv
    from branchpoint.core.records import Turn as T
    from branchpoint.core.records import utcnow

    now = utcnow()
    keep = {f: getattr(conv, f) for f in Conv.model_fields if f not in ("id", "run_id")}
    row = Conv(
        **keep
        | {
            "id": new_id,
            "run_id": run_id,
            "status": "pending",
            "stop_reason": None,
            "error": None,
            "parent_id": conv.id,
            "fork_turn": turn.index,
            "n_turns": turn.index + 1,
            "origin": REPLAY,
            "replay": {
                "parent_conversation_id": conv.id,
                "parent_run_id": conv.run_id,
                # None: a take-over, a new persona turn after the original's last reply
                "parent_turn_id": turn.id if any(t.id == turn.id for t in turns) else None,
                "parent_turn_index": turn.index,
                "annotator": annotator,
                "message_by": "person",
                "continue": continue_n,
            },
            "created_at": now,
            "updated_at": now,
        }
    )
    copied = [
        T(
            **{f: getattr(t, f) for f in T.model_fields if f not in ("id", "conversation_id")}
            | {
                "id": f"{new_id}:{t.index}",
                "conversation_id": new_id,
                "origin_turn_id": t.origin_turn_id or t.id,
            }
        )
        for t in turns
        if t.index < turn.index
    ]
    mine = T(
        id=f"{new_id}:{turn.index}",
        conversation_id=new_id,
        index=turn.index,
        exchange=turn.exchange,
        role="user",
        content=message,
        stage=turn.stage,
        branch_state=dict(turn.branch_state or {}),
        fired=list(turn.fired or []),
        model=f"person:{annotator}",
        created_at=now,
    )
    with store.session() as s:
        s.add(row)
        s.flush()  # the conversation before its turns (their foreign key)
        s.add_all([*copied, mine])
        s.commit()


async def areplay(
    store: Store,
    conversation_id: str,
    at: int,
    message: str,
    *,
    continue_n: int = 0,
    annotator: str = "cli",
    gateway: Gateway | None = None,
) -> ReplayResult:
    """Fork ``conversation_id`` at its persona turn ``at`` with ``message`` and go on against the
    same target: the chatbot's reply, then ``continue_n`` more exchanges with the persona."""
    from branchpoint.core.read import find_conversation, find_run, turns_by_conversation
    from branchpoint.core.records import utcnow
    from branchpoint.simulator.execute import execute
    from branchpoint.simulator.plan import Arm, plan_run

    if not message.strip():
        raise UserError("--message is empty (expected the persona message to send instead)")
    if not 0 <= continue_n <= MAX_CONTINUE:
        raise UserError(f"--continue {continue_n}: expected 0 to {MAX_CONTINUE} exchanges")
    conv = find_conversation(store, conversation_id)
    turns = turns_by_conversation(store, [conv.id]).get(conv.id, [])
    turns = sorted(turns, key=lambda t: t.index)
    turn = _check_turn(conv, turns, at)
    run = find_run(store, conv.run_id)
    if run is None:
        raise UserError(f"conversation {conv.id}: its run {conv.run_id} is not in the store")
    config = _config_of(run.config, conv, min(200, turn.exchange + continue_n))
    run_id = replay_run_id(conv.run_id)
    _check_scenario(config, conv)
    plan = plan_run(config, run_id=run_id)
    tree = _tree_of(plan, conv)
    base = next(a for a in tree.arms if a.variant_id == conv.variant_id)
    new_id = replay_id(conv.id, at, message, annotator, utcnow().isoformat())
    arm = Arm(base.variant, base.variant_id, dict(base.choices), new_id, 0)
    # The original's seed and params; max_turns: the replaced exchange and the ones asked for.
    spec = dataclasses.replace(tree, arms=[arm], fork="independent")
    _ensure_replay_run(store, run, run_id)
    _store_branch(
        store, conv, turns, turn, new_id=new_id, run_id=run_id, message=message,
        annotator=annotator, continue_n=continue_n,
    )  # fmt: skip
    own = gateway is None
    if gateway is None:
        from branchpoint.gateway.plugins import load_plugins
        from branchpoint.simulator.runner import make_gateway

        gateway = make_gateway(config, store)
        load_plugins(gateway)
    try:
        execution = await execute(dataclasses.replace(plan, trees=[spec]), store, gateway)
    finally:
        if own:
            await gateway.aclose()
    (result,) = execution.results
    return ReplayResult(
        conversation_id=new_id, run_id=run_id, parent_id=conv.id, at=at,
        status=result.status, stop_reason=result.stop_reason, error=result.error,
        n_turns=result.n_turns,
    )  # fmt: skip
