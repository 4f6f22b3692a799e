"""Conversation trees: the arms of one scenario x target x condition x replicate, sharing prefixes.

With ``fork: shared`` every arm starts in one group (arms whose first message differs, such as
profile variants, start apart). When a branch point fires and the group's arms hold different
options for it, the group forks into one subgroup per option, each continuing from a copy of the
state. A shared turn is written into every arm's conversation (same content, ``origin_turn_id`` =
the leader's turn), so each arm's transcript is complete; ``parent_id`` names the arm whose turns
an arm copies and ``fork_turn`` the index of its first own turn. ``fork: independent`` runs each
arm alone from the start.

Resume: arms are regrouped by the origin ids of their stored turns (arms that shared a prefix when
the process died share it again) and continue from their last stored turn.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from branchpoint.core.records import Turn
from branchpoint.core.store import store_failure
from branchpoint.gateway.budget import BudgetReached
from branchpoint.simulator.graph import (
    CallCounter,
    ConvState,
    GroupContext,
    apply_fired,
    initial_state,
    run_group,
)
from branchpoint.simulator.plan import Arm, TreeSpec
from branchpoint.simulator.turn_writer import TurnWriter

if TYPE_CHECKING:
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.scenarios.models import Scenario
    from branchpoint.simulator.events import EventDetector
    from branchpoint.simulator.persona import PersonaSimulator

FINISHED = ("completed", "failed")


@dataclass
class TreeEnv:
    """What all trees of a run share."""

    gateway: Gateway
    writer: TurnWriter
    persona_factory: Callable[[Scenario], PersonaSimulator]
    detector: EventDetector
    run_id: str
    simulator: str
    simulator_params: dict[str, Any]
    opening: Callable[[Scenario, Any], str]
    semaphore: asyncio.Semaphore
    calls: CallCounter = field(default_factory=CallCounter)
    target_params_record: dict[str, Any] = field(default_factory=dict)
    # conversation ids with rows in the store, where known: a tree none of whose arms is in it
    # has nothing to resume, and skips its two queries (a fresh run's trees all do)
    stored: Container[str] | None = None


@dataclass
class ArmResult:
    arm: Arm
    status: str
    stop_reason: str | None
    n_turns: int
    error: str | None = None


def initial_groups(
    spec: TreeSpec, arms: Sequence[Arm], opening: Callable[[Any], str]
) -> list[list[Arm]]:
    """Arms that can share a conversation from the start: same first message, ``fork: shared``."""
    if spec.fork == "independent":
        return [[a] for a in sorted(arms, key=lambda a: a.order)]
    return _partition(arms, opening)


def restore_state(spec: TreeSpec, turns: Sequence[Turn]) -> ConvState:
    """The state after the last stored turn of an arm (what the graph had when it wrote it)."""
    state = initial_state()
    if not turns:
        return state
    last = turns[-1]
    stage_ids = spec.scenario.stage_ids()
    last_user = next((t for t in reversed(turns) if t.role == "user"), None)
    state.update(
        exchange=last.exchange,
        stage=stage_ids.index(last.stage) if last.stage in stage_ids else 0,
        branch_state=dict(last.branch_state or {}),
        history=[
            {
                "role": t.role,
                "content": t.content,
                "key": t.origin_turn_id or t.id,
                "exchange": t.exchange,
                "events": list(t.events or []),
                "tactic": (t.persona_plan or {}).get("tactic"),
            }
            for t in turns
        ],
        persona_ended=bool(
            last_user is not None
            and last_user.exchange == last.exchange
            and last_user.finish_reason == "end_marker"
        ),
        next="target" if last.role == "user" else "route",
    )
    return state


def _partition(arms: Sequence[Arm], key: Callable[[Arm], Any]) -> list[list[Arm]]:
    out: dict[Any, list[Arm]] = {}
    for arm in sorted(arms, key=lambda a: a.order):
        out.setdefault(key(arm), []).append(arm)
    return list(out.values())


async def run_tree(spec: TreeSpec, env: TreeEnv) -> list[ArmResult]:
    """Run (or resume) every arm of one tree; returns one result per arm."""
    opening = lambda arm: env.opening(spec.scenario, arm.variant)  # noqa: E731
    if env.stored is None or any(a.conversation_id in env.stored for a in spec.arms):
        stored = env.writer.load(spec.arms)
    else:
        stored = {a.conversation_id: (None, []) for a in spec.arms}
    results: list[ArmResult] = []
    work: list[tuple[list[Arm], ConvState]] = []
    if all(conv is None for conv, _ in stored.values()):
        groups = initial_groups(spec, spec.arms, opening)
        await env.writer.ensure_conversations(spec, env, groups)
        work = [(g, initial_state()) for g in groups]
    else:
        await env.writer.ensure_conversations(
            spec, env, [[a] for a in spec.arms if stored[a.conversation_id][0] is None]
        )
        pending: list[Arm] = []
        for arm in spec.arms:
            conv, turns = stored[arm.conversation_id]
            if conv is not None and conv.status in FINISHED:
                results.append(
                    ArmResult(arm, conv.status, conv.stop_reason, conv.n_turns, conv.error)
                )
            else:
                pending.append(arm)

        def origin_keys(arm: Arm) -> tuple[str, ...]:
            return tuple(t.origin_turn_id or t.id for t in stored[arm.conversation_id][1])

        for group in _partition(pending, origin_keys):
            turns = stored[group[0].conversation_id][1]
            subgroups = (
                initial_groups(spec, group, opening)
                if not turns
                else ([[a] for a in group] if spec.fork == "independent" else [group])
            )
            work += [(g, restore_state(spec, turns)) for g in subgroups]

    async def drive(arms: list[Arm], state: ConvState) -> list[ArmResult]:
        persona = env.persona_factory(spec.scenario)
        ctx = GroupContext(
            scenario=spec.scenario,
            arms=arms,
            gateway=env.gateway,
            persona=persona,
            detector=env.detector,
            writer=env.writer,
            target=spec.target,
            target_params=spec.target_params,
            system_prompt=spec.system_prompt,
            seed=spec.seed,
            max_turns=spec.max_turns,
            run_id=env.run_id,
            independent=spec.fork == "independent",
            opening=opening,
            calls=env.calls,
        )
        async with env.semaphore:
            await env.writer.set_status(arms, "running")
            try:
                final = await run_group(state, ctx)
                await env.writer.settled(arms)  # a turn that failed to commit fails the arms here
            except asyncio.CancelledError:
                raise
            except BudgetReached as exc:
                # not a failure: the arms stop where they are, resumable by a re-run
                error = f"stopped_by_budget: {exc}"[:2000]
                await env.writer.set_status(arms, "interrupted", "stopped_by_budget", error)
                n = len(state.get("history") or [])
                return [ArmResult(a, "interrupted", "stopped_by_budget", n, error) for a in arms]
            except Exception as exc:  # a bug: record it on the arms, keep the run going
                if store_failure(exc) is not None:
                    # The store went away (a full disk, a lost server): the arms are not failed,
                    # they are unfinished. Marking them failed (a write that may still succeed)
                    # left them out of the re-run that "run the same command again" promises.
                    raise
                error = f"{type(exc).__name__}: {exc}"[:2000]
                await env.writer.set_status(arms, "failed", "simulator_error", error)
                n = len(state.get("history") or [])
                return [ArmResult(a, "failed", "simulator_error", n, error) for a in arms]
        n_turns = len(final.get("history") or [])
        if final.get("split"):
            return await fork(arms, final, ctx)
        reason = final.get("stop_reason") or "max_turns"
        status = "failed" if reason in ("target_error", "simulator_error") else "completed"
        await env.writer.set_status(arms, status, reason, final.get("error"))
        return [ArmResult(a, status, reason, n_turns, final.get("error")) for a in arms]

    async def fork(arms: list[Arm], state: ConvState, ctx: GroupContext) -> list[ArmResult]:
        split = state["split"] or []
        subgroups = _partition(arms, lambda a: tuple(ctx.option_of(a, b) for b in split))
        await env.writer.record_split(arms[0], subgroups, len(state.get("history") or []))
        children = []
        for group in subgroups:
            sub = copy.deepcopy(state)
            sub.update(
                apply_fired(
                    spec.scenario,
                    sub,
                    list(sub.get("fired") or []),
                    lambda b, lead=group[0]: ctx.option_of(lead, b),
                )
            )
            sub.update(split=None, next="persona")
            children.append(drive(group, sub))
        nested = await asyncio.gather(*children)
        return [r for rs in nested for r in rs]

    nested = await asyncio.gather(*(drive(g, s) for g, s in work))
    results += [r for rs in nested for r in rs]
    return results
