"""Growing the trees of a plan into a store, through a gateway: the middle stage of a run.

``execute(plan, store, gateway)`` runs (or resumes) every tree of ``plan`` concurrently on the
running asyncio loop, ``plan.concurrency`` groups in flight, so a local model's provider gets
several requests at once to batch. ``trees=`` executes only some of them: what a worker process
does with the share of a plan it was sent. It writes conversations and turns and their statuses;
the Run row, the lease and interruption marking belong to the caller (``branchpoint.simulator.lifecycle``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.simulator.plan import RunPlan, TreeSpec
    from branchpoint.simulator.tree import ArmResult


class Progress:
    """Turns written out of the turns a run can write at most (arms x max_turns x 2)."""

    def __init__(self, callback: Callable[[int, int], None] | None = None) -> None:
        self.total = 0
        self.done = 0
        self.callback = callback or (lambda done, total: None)

    def add_total(self, n: int) -> None:
        self.total += n
        self.callback(self.done, self.total)

    def advance(self, n: int) -> None:
        self.done += n
        self.callback(self.done, self.total)


@dataclass
class Execution:
    """What executing some trees did: each arm's outcome, and the model calls made, by purpose."""

    results: list[ArmResult] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)


async def execute(
    plan: RunPlan,
    store: Store,
    gateway: Gateway,
    *,
    trees: Sequence[TreeSpec] | None = None,
    progress: Progress | None = None,
) -> Execution:
    """Grow ``trees`` (default: all of ``plan.trees``) into ``store``; see the module docstring.

    A failure inside a tree is recorded on its arms and the others go on; cancellation and
    store failures propagate. ``progress`` advances by every turn written, and by the turns an
    arm that stopped early will never write.
    """
    from branchpoint.core.read import existing_conversations
    from branchpoint.gateway.gateway import stored_params
    from branchpoint.scenarios import variants as variants_api
    from branchpoint.simulator.adaptive import split_mode
    from branchpoint.simulator.events import LLMDetector, RuleDetector
    from branchpoint.simulator.graph import CallCounter
    from branchpoint.simulator.persona import PersonaSimulator
    from branchpoint.simulator.tree import TreeEnv, run_tree
    from branchpoint.simulator.turn_writer import TurnWriter

    progress = progress or Progress()
    rules = RuleDetector(plan.event_patterns)
    detector = (
        LLMDetector(
            gateway, plan.detector, plan.detector_params, fallback=rules, run_id=plan.run_id
        )
        if plan.detector
        else rules
    )
    writer = TurnWriter(store, on_turns=progress.advance)
    semaphore, calls = asyncio.Semaphore(plan.concurrency), CallCounter()
    todo = plan.trees if trees is None else trees
    # one look for the whole share instead of two queries per tree, on the event loop, before
    # the first call (0.3-0.4 s for a fresh run of 1,000 conversations)
    stored = existing_conversations(store, (a.conversation_id for t in todo for a in t.arms))

    def env_for(simulator: str) -> TreeEnv:
        # One env per simulator (a sensitivity run plays every tree with each); they share the
        # writer, the concurrency limit and the call counts.
        return TreeEnv(
            gateway=gateway,
            writer=writer,
            detector=detector,
            run_id=plan.run_id,
            persona_factory=lambda scenario: PersonaSimulator(
                gateway,
                scenario,
                split_mode(simulator)[1],
                plan.persona_params,
                max_retries=plan.persona_retries,
                run_id=plan.run_id,
                realism_min=plan.realism_min,
                mode=split_mode(simulator)[0],
            ),
            simulator=simulator,
            simulator_params=stored_params(plan.persona_params)
            | {"persona_retries": plan.persona_retries}
            | ({"realism_min": plan.realism_min} if plan.realism_min else {}),
            opening=variants_api.render_opening,
            semaphore=semaphore,
            calls=calls,
            target_params_record=plan.target_params_record,
            stored=stored,
        )

    envs = {sim: env_for(sim) for sim in dict.fromkeys([plan.simulator, *plan.simulators])}
    execution = Execution()

    async def one_tree(spec: TreeSpec) -> None:
        sim = spec.simulator or plan.simulator
        if sim not in envs:  # a scenario played adaptively (adaptive@SPEC): its own env
            envs[sim] = env_for(sim)
        results = await run_tree(spec, envs[sim])
        for r in results:
            progress.advance(max(0, spec.max_turns * 2 - r.n_turns))
        execution.results.extend(results)

    try:
        try:
            await asyncio.gather(*(one_tree(t) for t in todo))
        finally:
            # what the write-behind thread still holds is committed before the run is finalised
            await gateway.flush()
            await writer.queue.drain()
    finally:
        execution.calls = {
            "persona": calls.persona,
            "target": calls.target,
            "detector": calls.detector,
        }
    return execution
