"""The engine's write path: turns and conversation state into the store, one transaction per
group-turn, so a crash never loses a finished turn and never leaves half of one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sqlmodel import select

from core.records import Conversation, Turn, utcnow

if TYPE_CHECKING:
    from core.store import Store
    from simulator.plan import Arm, TreeSpec


class RunFields(Protocol):
    """What a new conversation row takes from its run (``simulator.tree.TreeEnv`` has it)."""

    run_id: str
    simulator: str
    simulator_params: dict[str, Any]
    target_params_record: dict[str, Any]


class TurnWriter:
    """Writes turns and conversation state to the store, one transaction per group-turn."""

    def __init__(self, store: Store, on_turns: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.on_turns = on_turns or (lambda n: None)

    def ensure_conversations(self, spec: TreeSpec, env: RunFields, groups: list[list[Arm]]) -> None:
        with self.store.session() as s:
            for group in groups:
                for i, arm in enumerate(group):
                    if s.get(Conversation, arm.conversation_id) is not None:
                        continue
                    s.add(
                        Conversation(
                            id=arm.conversation_id,
                            run_id=env.run_id,
                            scenario_id=spec.scenario.id,
                            scenario_hash=spec.scenario_hash,
                            scenario_path=spec.scenario_path,
                            variant_id=arm.variant_id,
                            choices=arm.variant.as_choices_record(),
                            target=spec.target,
                            target_params=env.target_params_record,
                            condition=spec.condition,
                            simulator=env.simulator,
                            simulator_params=env.simulator_params,
                            replicate=spec.replicate,
                            seed=spec.seed,
                            status="pending",
                            parent_id=group[0].conversation_id if i else None,
                        )
                    )
            s.commit()

    def write_turn(self, arms: Sequence[Arm], *, index: int, **fields: Any) -> str:
        """Write one turn into every arm's conversation; returns the leader's turn id."""
        leader_id = f"{arms[0].conversation_id}:{index}"
        now = utcnow()
        with self.store.session() as s:
            for i, arm in enumerate(arms):
                s.add(
                    Turn(
                        id=f"{arm.conversation_id}:{index}",
                        conversation_id=arm.conversation_id,
                        index=index,
                        origin_turn_id=leader_id if i else None,
                        created_at=now,
                        **fields,
                    )
                )
                conv = s.get(Conversation, arm.conversation_id)
                if conv is not None:
                    conv.n_turns = index + 1
                    conv.status = "running"
                    conv.updated_at = now
                    s.add(conv)
            s.commit()
        self.on_turns(len(arms))
        return leader_id

    def set_status(
        self,
        arms: Sequence[Arm],
        status: str,
        stop_reason: str | None = None,
        error: str | None = None,
    ) -> None:
        with self.store.session() as s:
            for arm in arms:
                conv = s.get(Conversation, arm.conversation_id)
                if conv is None:
                    continue
                conv.status = status
                conv.stop_reason = stop_reason
                conv.error = error
                conv.updated_at = utcnow()
                s.add(conv)
            s.commit()

    def record_split(self, old_leader: Arm, subgroups: list[list[Arm]], fork_index: int) -> None:
        with self.store.session() as s:
            for group in subgroups:
                leader = group[0]
                if leader is not old_leader:
                    conv = s.get(Conversation, leader.conversation_id)
                    if conv is not None:
                        conv.parent_id = old_leader.conversation_id
                        conv.fork_turn = fork_index
                        s.add(conv)
                for arm in group[1:]:
                    conv = s.get(Conversation, arm.conversation_id)
                    if conv is not None:
                        conv.parent_id = leader.conversation_id
                        s.add(conv)
            s.commit()

    def load(self, arms: Sequence[Arm]) -> dict[str, tuple[Conversation | None, list[Turn]]]:
        out: dict[str, tuple[Conversation | None, list[Turn]]] = {}
        with self.store.session() as s:
            for arm in arms:
                conv = s.get(Conversation, arm.conversation_id)
                turns = (
                    list(
                        s.exec(
                            select(Turn)
                            .where(Turn.conversation_id == arm.conversation_id)
                            .order_by(Turn.index)
                        ).all()
                    )
                    if conv is not None
                    else []
                )
                out[arm.conversation_id] = (conv, turns)
        return out
