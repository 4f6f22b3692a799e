"""The engine's write path: turns and conversation state into the store.

Writes go through the store's write-behind thread (``branchpoint.gateway.write_behind``) as Core
statements. A group-turn (the turn in every arm of the group, and the arms' progress) is one unit
of one transaction, so a crash never leaves half of one, and the event loop never waits on the
database.

``write_turn`` returns once the turn is queued, not committed: the conversation's next model call
goes out while the commit is made, instead of after it: a commit's wait (the batch's linger, the
thread hand-over, another process's lock on a SQLite file) is off every call's path
(``benchmarks/throughput.py``, 990 conversations at 256 in flight on 2 cores: 2% less wall time
with one process, 5% with two, whose commits wait for each other). The conversation's next write
(its next turn, its status, a fork) first waits for that commit and raises what it raised, and
``settled`` waits for it where nothing more is written. So a conversation has at most one turn not
yet committed, and a SIGKILL loses at most that turn's call and the call in flight after it, which
a resume makes again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import bindparam, insert, update
from sqlmodel import col, select

from branchpoint.core.records import Conversation, Turn, utcnow
from branchpoint.gateway.write_behind import (
    RANK_CONVERSATION,
    RANK_PROGRESS,
    RANK_SPLIT,
    RANK_TURN,
    column_defaults,
    shared_writer,
    upsert,
)

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.simulator.plan import Arm, TreeSpec

_conv = Conversation.__table__  # type: ignore[attr-defined]
_turn = Turn.__table__  # type: ignore[attr-defined]
_INSERT_TURN = insert(_turn)
_PROGRESS = (
    update(_conv)
    .where(_conv.c.id == bindparam("b_id"))
    .values(n_turns=bindparam("b_n"), status="running", updated_at=bindparam("b_at"))
)
_STATUS = (
    update(_conv)
    .where(_conv.c.id == bindparam("b_id"))
    .values(
        status=bindparam("b_status"),
        stop_reason=bindparam("b_reason"),
        error=bindparam("b_error"),
        updated_at=bindparam("b_at"),
    )
)
_PARENT = (
    update(_conv).where(_conv.c.id == bindparam("b_id")).values(parent_id=bindparam("b_parent"))
)
_FORK = (
    update(_conv)
    .where(_conv.c.id == bindparam("b_id"))
    .values(parent_id=bindparam("b_parent"), fork_turn=bindparam("b_fork"))
)
_TURN_DEFAULTS = column_defaults(Turn, id="", conversation_id="", index=0, exchange=0, role="")
_CONV_DEFAULTS = column_defaults(
    Conversation, id="", run_id="", scenario_id="", scenario_hash="", variant_id="", target=""
)


class RunFields(Protocol):
    """What a new conversation row takes from its run (``branchpoint.simulator.tree.TreeEnv`` has it)."""

    run_id: str
    simulator: str
    simulator_params: dict[str, Any]
    target_params_record: dict[str, Any]


class TurnWriter:
    """Writes turns and conversation state to the store, one transaction per group-turn."""

    def __init__(self, store: Store, on_turns: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.on_turns = on_turns or (lambda n: None)
        self.queue = shared_writer(store)
        # conversation id -> the commit of its last turn, while it may not have happened yet
        self._uncommitted: dict[str, asyncio.Future[None]] = {}

    async def settled(self, arms: Sequence[Arm]) -> None:
        """Wait until the turns written for ``arms`` are committed; raise what a commit raised
        (once: a failure is not raised again by the next write)."""
        futures = {
            id(f): f
            for a in arms
            if (f := self._uncommitted.pop(a.conversation_id, None)) is not None
        }
        failure: BaseException | None = None
        for future in futures.values():  # every one, so that no failure goes unretrieved
            try:
                await asyncio.shield(future)
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    async def ensure_conversations(
        self, spec: TreeSpec, env: RunFields, groups: list[list[Arm]]
    ) -> None:
        now = utcnow()
        # rows made from the columns' defaults, not from Conversation objects: an ORM instance
        # costs a third of a millisecond, 1,000 of them before a sweep's first call
        rows = [
            _CONV_DEFAULTS
            | {
                "id": arm.conversation_id,
                "run_id": env.run_id,
                "scenario_id": spec.scenario.id,
                "scenario_hash": spec.scenario_hash,
                "scenario_path": spec.scenario_path,
                "language": spec.scenario.conversation_language(),
                "variant_id": arm.variant_id,
                "choices": arm.variant.as_choices_record(),
                "target": spec.target,
                "target_params": env.target_params_record,
                "condition": spec.condition,
                "simulator": env.simulator,
                "simulator_params": env.simulator_params,
                "replicate": spec.replicate,
                "seed": spec.seed,
                "status": "pending",
                "parent_id": group[0].conversation_id if i else None,
                "created_at": now,
                "updated_at": now,
            }
            for group in groups
            for i, arm in enumerate(group)
        ]
        if not rows:
            return
        # a resumed tree's stored arms keep their rows
        stmt = upsert(self.store, _conv, ["id"], [])
        await self.queue.write([(RANK_CONVERSATION, stmt, rows)])

    async def write_turn(self, arms: Sequence[Arm], *, index: int, **fields: Any) -> str:
        """Queue one turn into every arm's conversation, once the arms' last turn is committed;
        returns the leader's turn id."""
        leader_id = f"{arms[0].conversation_id}:{index}"
        now = utcnow()
        base = _TURN_DEFAULTS | fields | {"index": index, "created_at": now}
        turns = [
            base
            | {
                "id": f"{arm.conversation_id}:{index}",
                "conversation_id": arm.conversation_id,
                "origin_turn_id": leader_id if i else None,
            }
            for i, arm in enumerate(arms)
        ]
        progress = [{"b_id": a.conversation_id, "b_n": index + 1, "b_at": now} for a in arms]
        await self.settled(arms)
        committed = self.queue.committed(
            [(RANK_TURN, _INSERT_TURN, turns), (RANK_PROGRESS, _PROGRESS, progress)]
        )
        for arm in arms:
            self._uncommitted[arm.conversation_id] = committed
        self.on_turns(len(arms))
        return leader_id

    async def set_status(
        self,
        arms: Sequence[Arm],
        status: str,
        stop_reason: str | None = None,
        error: str | None = None,
    ) -> None:
        await self.settled(arms)
        now = utcnow()
        rows = [
            {
                "b_id": a.conversation_id,
                "b_status": status,
                "b_reason": stop_reason,
                "b_error": error,
                "b_at": now,
            }
            for a in arms
        ]
        await self.queue.write([(RANK_PROGRESS, _STATUS, rows)])

    async def record_split(
        self, old_leader: Arm, subgroups: list[list[Arm]], fork_index: int
    ) -> None:
        await self.settled([a for group in subgroups for a in group])
        forks, parents = [], []
        for group in subgroups:
            leader = group[0]
            if leader is not old_leader:
                forks.append(
                    {
                        "b_id": leader.conversation_id,
                        "b_parent": old_leader.conversation_id,
                        "b_fork": fork_index,
                    }
                )
            parents += [
                {"b_id": a.conversation_id, "b_parent": leader.conversation_id} for a in group[1:]
            ]
        await self.queue.write([(RANK_SPLIT, _FORK, forks), (RANK_SPLIT, _PARENT, parents)])

    def load(self, arms: Sequence[Arm]) -> dict[str, tuple[Conversation | None, list[Turn]]]:
        """Each arm's stored conversation and turns (two queries for the whole tree)."""
        ids = [a.conversation_id for a in arms]
        with self.store.session() as s:
            convs = {
                c.id: c for c in s.exec(select(Conversation).where(col(Conversation.id).in_(ids)))
            }
            turns: dict[str, list[Turn]] = {i: [] for i in ids}
            if convs:
                query = (
                    select(Turn)
                    .where(col(Turn.conversation_id).in_(list(convs)))
                    .order_by(col(Turn.conversation_id), col(Turn.index))
                )
                for t in s.exec(query):
                    turns[t.conversation_id].append(t)
        return {i: (convs.get(i), turns[i] if i in convs else []) for i in ids}
