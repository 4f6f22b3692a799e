"""One conversation group on a LangGraph StateGraph: route -> persona -> target -> observe.

A *group* is a set of arms (variants) that still share their conversation. The graph runs the
group until it stops (max_turns, persona_ended, target_error, simulator_error) or until a branch
point fires on which the group's arms hold different options: then it ends with ``split`` set and
the tree (``branchpoint.simulator.tree``) forks the group into subgroups, each continuing from a copy of the
state, entering the graph again at ``persona``.

Every turn is written to the store by the node that makes it, for every arm of the group at once
(one transaction), and the group's next write waits for that commit
(``branchpoint.simulator.turn_writer``): a crash never leaves half a turn, and never more than one turn per
conversation uncommitted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from branchpoint.gateway.call_layout import CallLayout, TurnsRef
from branchpoint.gateway.completion import Completion, GenParams, Message, ModelError
from branchpoint.simulator.events import RuleDetector

if TYPE_CHECKING:
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.scenarios.models import BranchOption, Scenario, Stage
    from branchpoint.simulator.events import EventDetector
    from branchpoint.simulator.persona import PersonaSimulator
    from branchpoint.simulator.plan import Arm
    from branchpoint.simulator.turn_writer import TurnWriter


class ConvState(TypedDict, total=False):
    exchange: int  # exchange of the last stored turn; 0 before the opening
    stage: int  # index into scenario.stages (-1: the scenario has no stages)
    branch_state: dict[str, str]  # branch point -> option in force
    fired: list[str]  # branch points that fired for the next persona message
    history: list[dict[str, Any]]  # {role, content, key, exchange, events}
    persona_ended: bool
    reply: dict[str, Any] | None  # the target's completion, waiting for observe
    stop_reason: str | None
    error: str | None
    split: list[str] | None  # branch points on which the group must fork before going on
    next: str  # where the graph enters: route | persona | target


def initial_state() -> ConvState:
    return ConvState(
        exchange=0,
        stage=0,
        branch_state={},
        fired=[],
        history=[],
        persona_ended=False,
        reply=None,
        stop_reason=None,
        error=None,
        split=None,
        next="route",
    )


def derive_seed(base: int, *parts: object) -> int:
    """A per-call seed from the replicate's seed and the call's position (stable across runs)."""
    digest = hashlib.sha256(":".join(str(p) for p in (base, *parts)).encode()).hexdigest()
    return int(digest[:8], 16) % (2**31 - 1)


@dataclass
class CallCounter:
    persona: int = 0
    target: int = 0
    detector: int = 0


@dataclass
class GroupContext:
    """Everything a group's nodes need that is not conversation state."""

    scenario: Scenario
    arms: list[Arm]  # arms[0] leads: its turns are the originals, the others copy them
    gateway: Gateway
    persona: PersonaSimulator
    detector: EventDetector
    writer: TurnWriter
    target: str
    target_params: GenParams
    system_prompt: str | None
    seed: int
    max_turns: int
    run_id: str | None
    independent: bool = False
    opening: Callable[[Any], str] | None = None  # variant -> first persona message
    calls: CallCounter = field(default_factory=CallCounter)
    # the history's messages as made for the last call: a group's history only grows
    _messages: list[Message] = field(default_factory=list)

    def history_messages(self, history: list[dict[str, Any]]) -> list[Message]:
        """``history`` as messages (the chatbot's view), making only those new since last time."""
        made = self._messages
        n = len(made)
        if n > len(history) or any(
            m.content is not h["content"] or m.role != h["role"] for m, h in zip(made, history)
        ):
            made.clear()  # not the history this was made for (a copy after a fork): start again
            n = 0
        made += [Message(role=h["role"], content=h["content"]) for h in history[n:]]
        return list(made)

    @property
    def leader(self) -> Arm:
        return self.arms[0]

    def option_of(self, arm: Arm, bp_id: str) -> str:
        chosen = arm.choices.get(bp_id)
        return chosen if chosen is not None else self.scenario.branch_point(bp_id).baseline

    def seed_for(self, index: int, role: str) -> int:
        # With independent arms the variant id enters the seed: otherwise two arms asking the same
        # question would get the same (cached) answer, and "independent" would silently share.
        salt = self.leader.variant_id if self.independent else ""
        return derive_seed(self.seed, index, role, salt)


# -- pure helpers shared with the tree --------------------------------------------------------------


def advance_stage(scenario: Scenario, stage: int, exchange: int) -> int:
    """The stage in force at ``exchange``: move on past stages whose ``until_turn`` has passed."""
    stages = scenario.stages
    while 0 <= stage < len(stages) - 1:
        until = stages[stage].until_turn
        if until is None or exchange <= until:
            break
        stage += 1
    return stage


def apply_fired(
    scenario: Scenario, state: ConvState, fired: list[str], option_of: Callable[[str], str]
) -> ConvState:
    """Put the options of the fired branch points in force; a first firing may jump to a stage."""
    branch_state = dict(state.get("branch_state") or {})
    stage = state.get("stage", 0)
    for bp_id in fired:
        option_name = option_of(bp_id)
        first_time = bp_id not in branch_state
        branch_state[bp_id] = option_name
        option = scenario.branch_point(bp_id).options[option_name]
        if first_time and option.goto_stage:
            stage = scenario.stage_ids().index(option.goto_stage)
    return ConvState(branch_state=branch_state, stage=stage)


def fired_next(scenario: Scenario, state: ConvState) -> tuple[list[str], int]:
    """Branch points that fire for the next persona message, and the stage then in force."""
    exchange = state.get("exchange", 0)
    fired: list[str] = []
    history = state.get("history") or []
    if exchange > 0 and history and history[-1]["role"] == "assistant":
        events = set(history[-1].get("events") or [])
        fired += [bp.id for bp in scenario.branch_points if bp.trigger.on_event in events]
    stage = advance_stage(scenario, state.get("stage", 0), exchange + 1)
    fired += [bp.id for bp in scenario.branch_points if bp.trigger.at_turn == exchange + 1]
    return fired, stage


def _stage(ctx: GroupContext, state: ConvState) -> Stage | None:
    stages = ctx.scenario.stages
    idx = state.get("stage", 0)
    return stages[idx] if 0 <= idx < len(stages) else None


def _options(
    ctx: GroupContext, bp_ids: list[str], branch_state: dict[str, str]
) -> list[BranchOption]:
    return [
        ctx.scenario.branch_point(b).options[branch_state[b]] for b in bp_ids if b in branch_state
    ]


# -- nodes ----------------------------------------------------------------------------------------


def _ctx(config: RunnableConfig) -> GroupContext:
    return config["configurable"]["ctx"]


async def route(state: ConvState, config: RunnableConfig) -> ConvState:
    ctx = _ctx(config)
    exchange = state.get("exchange", 0)
    if exchange > 0:
        if state.get("persona_ended"):
            return ConvState(stop_reason="persona_ended")
        if exchange >= ctx.max_turns:
            return ConvState(stop_reason="max_turns")
    fired, stage = fired_next(ctx.scenario, state)
    disagree = [b for b in fired if len({ctx.option_of(a, b) for a in ctx.arms}) > 1]
    if disagree:
        return ConvState(split=disagree, fired=fired, stage=stage)
    update = apply_fired(
        ctx.scenario, {**state, "stage": stage}, fired, lambda b: ctx.option_of(ctx.leader, b)
    )
    return ConvState(fired=fired, split=None, **update)


async def persona(state: ConvState, config: RunnableConfig) -> ConvState:
    ctx = _ctx(config)
    history = list(state.get("history") or [])
    exchange = state.get("exchange", 0) + 1
    index = len(history)
    fired = list(state.get("fired") or [])
    branch_state = dict(state.get("branch_state") or {})
    stage = _stage(ctx, state)
    fields: dict[str, Any] = {}
    if exchange == 1 and not history:
        text = ctx.opening(ctx.leader) if ctx.opening else ctx.scenario.opening
        ended = False
        fields.update(model="scenario:opening")
    else:
        new = _options(ctx, fired, branch_state)
        kept = _options(ctx, [b for b in branch_state if b not in fired], branch_state)
        reply = await ctx.persona.next_message(
            [(h["role"], h["content"]) for h in history],
            stage,
            new,
            kept,
            seed=ctx.seed_for(index, "persona"),
            conversation_id=ctx.leader.conversation_id,
            history_stored=True,
            branch_state=branch_state,
            tactics_used=[h["tactic"] for h in history if h.get("tactic")],
        )
        ctx.calls.persona += reply.calls
        if reply.error is not None:
            reasons = "; ".join(reply.retry_reasons)
            return ConvState(
                stop_reason="simulator_error",
                error=reply.error + (f" [retries: {reasons}]" if reasons else ""),
            )
        if reply.ended and not reply.text:
            return ConvState(stop_reason="persona_ended")
        text, ended = reply.text, reply.ended
        fields.update(_completion_fields(reply.completion, reply.call_id))
        fields.update(retries=reply.retries, retry_reasons=reply.retry_reasons)
        if reply.plan is not None:
            fields["persona_plan"] = reply.plan
        if ended:
            fields["finish_reason"] = "end_marker"  # how a resume knows the persona said goodbye
    key = await ctx.writer.write_turn(
        ctx.arms,
        index=index,
        exchange=exchange,
        role="user",
        content=text,
        stage=stage.id if stage else None,
        branch_state=branch_state,
        fired=fired,
        **fields,
    )
    history.append(
        {"role": "user", "content": text, "key": key, "exchange": exchange, "events": [],
         "tactic": (fields.get("persona_plan") or {}).get("tactic")}
    )  # fmt: skip
    return ConvState(exchange=exchange, history=history, fired=[], persona_ended=ended)


async def target(state: ConvState, config: RunnableConfig) -> ConvState:
    ctx = _ctx(config)
    history = state.get("history") or []
    messages: list[Message] = []
    if ctx.system_prompt:
        prompt = ctx.system_prompt
        messages.append(Message(role="system", content=prompt, cache_prefix=len(prompt)))
    messages += ctx.history_messages(history)
    if history:
        # a cache breakpoint after the history: the next exchange's call extends this prefix
        # (providers with explicit caches only; nothing else is sent differently)
        last = messages[-1]
        messages[-1] = last.model_copy(update={"cache_prefix": len(last.content)})
    params = ctx.target_params
    if params.seed is None:
        params = params.merged({"seed": ctx.seed_for(len(history), "target")})
    ctx.calls.target += 1
    try:
        completion, call_id = await ctx.gateway.complete(
            ctx.target,
            messages,
            params,
            purpose="target",
            run_id=ctx.run_id,
            conversation_id=ctx.leader.conversation_id,
            # the history is the leader's stored turns: its row refers to them
            layout=CallLayout(
                lead=tuple(messages[: len(messages) - len(history)]),
                turns=TurnsRef(ctx.leader.conversation_id, len(history)),
            ),
        )
    except ModelError as exc:
        return ConvState(stop_reason="target_error", error=f"target model failed: {exc.reason}")
    # the object itself: no checkpointer serialises the state, so a dump would be wasted work
    return ConvState(reply={"completion": completion, "call_id": call_id})


async def observe(state: ConvState, config: RunnableConfig) -> ConvState:
    ctx = _ctx(config)
    history = list(state.get("history") or [])
    reply = state["reply"] or {}
    completion: Completion = reply["completion"]
    if isinstance(ctx.detector, RuleDetector):  # rules read the reply alone
        detection = await ctx.detector.detect(completion.text)
    else:
        context = ctx.history_messages(history)
        kwargs = (
            {"conversation_id": ctx.leader.conversation_id}
            if hasattr(ctx.detector, "gateway")
            else {}
        )
        detection = await ctx.detector.detect(completion.text, context, **kwargs)
    if detection.source != "rules":
        ctx.calls.detector += 1
    source = detection.source + (f": {detection.error}" if detection.error else "")
    stage = _stage(ctx, state)
    index = len(history)
    exchange = state.get("exchange", 0)
    key = await ctx.writer.write_turn(
        ctx.arms,
        index=index,
        exchange=exchange,
        role="assistant",
        content=completion.text,
        stage=stage.id if stage else None,
        branch_state=dict(state.get("branch_state") or {}),
        fired=[],
        events=detection.events,
        event_source=source,
        **_completion_fields(completion, reply.get("call_id")),
    )
    history.append(
        {
            "role": "assistant",
            "content": completion.text,
            "key": key,
            "exchange": exchange,
            "events": list(detection.events),
        }
    )
    return ConvState(history=history, reply=None)


async def exchanges(state: ConvState, config: RunnableConfig) -> ConvState:
    """One super-step: the exchanges (route, the persona's message, the chatbot's reply) until
    the conversation stops or the group must fork (a branch point fires on which its arms
    disagree); the tree then forks it and runs each part from the persona's message. A resumed
    conversation whose last stored turn is the persona's starts with the chatbot's reply.

    LangGraph's per-step bookkeeping (channel copies, a task per node, callbacks) costs more
    than the nodes' own work against a fast server, and an exchange that neither stops nor
    forks the group has nothing for the graph to decide: the route of one at which a branch
    point fires applies the option all the group's arms take, in this step like any other."""
    merged: dict[str, Any] = dict(state)

    def apply(step: ConvState) -> bool:
        merged.update(step)
        return not (step.get("stop_reason") or step.get("split"))

    entry = state.get("next")
    if entry == "target":
        if not apply(await reply(merged, config)):  # type: ignore[arg-type]
            return merged  # type: ignore[return-value]
        entry = "route"
    if entry != "persona" and not apply(await route(merged, config)):  # type: ignore[arg-type]
        return merged  # type: ignore[return-value]
    merged["next"] = "route"
    while (
        apply(await persona(merged, config))  # type: ignore[arg-type]
        and apply(await reply(merged, config))  # type: ignore[arg-type]
        and apply(await route(merged, config))  # type: ignore[arg-type]
    ):
        pass
    return merged  # type: ignore[return-value]


async def reply(state: ConvState, config: RunnableConfig) -> ConvState:
    """The chatbot's reply to the persona's stored message, and what it shows (events)."""
    update = await target(state, config)
    if update.get("stop_reason"):
        return ConvState(next="route", **update)
    observed = await observe({**state, **update}, config)
    return ConvState(next="route", **(update | observed))


def _completion_fields(completion: Completion | None, call_id: str | None) -> dict[str, Any]:
    if completion is None:
        return {}
    return dict(
        reasoning=completion.reasoning,
        model=completion.model,
        tokens_in=completion.tokens_in,
        tokens_out=completion.tokens_out,
        cost=completion.cost,
        latency_s=completion.latency_s,
        finish_reason=completion.finish_reason,
        call_id=call_id,
    )


# -- the graph ------------------------------------------------------------------------------------


class GraphState(TypedDict):
    """The graph's one channel: the whole ConvState, replaced by each step.

    One channel instead of one per ConvState key: LangGraph reads, copies and writes every
    channel on every step, and a step here always produces the whole next state anyway."""

    conv: ConvState


async def _exchange_step(state: GraphState, config: RunnableConfig) -> GraphState:
    return GraphState(conv=await exchanges(state["conv"], config))


_GRAPH: Any = None


def conversation_graph() -> Any:
    """The compiled graph (built once; the group's context travels in the run config).

    One super-step per stretch of exchanges between forks (``exchanges``: route -> persona ->
    target -> observe, again until the group must fork or the conversation stops, from the
    chatbot's reply where a resumed conversation's last stored turn is the persona's). No
    checkpointer: the store is the checkpoint (``branchpoint.simulator.tree.restore_state``). Its state is
    one channel holding the ConvState (``GraphState``).

    One node on plain edges: a conditional entry (a branch runnable) or a routing Command would
    add their own tasks and callbacks to each invocation, and a group's invocation already
    costs LangGraph over a millisecond (``benchmarks/graph_overhead.py``)."""
    global _GRAPH
    if _GRAPH is None:
        g = StateGraph(GraphState)
        g.add_node("exchanges", _exchange_step)
        g.add_edge(START, "exchanges")
        g.add_edge("exchanges", END)
        _GRAPH = g.compile()
    return _GRAPH


async def run_group(state: ConvState, ctx: GroupContext) -> ConvState:
    """Run a group from ``state`` (entering at ``state['next']``) until it stops or must fork."""
    # one super-step, however many exchanges: LangGraph's default recursion limit is ample
    result = await conversation_graph().ainvoke(
        GraphState(conv=state), config={"configurable": {"ctx": ctx}}
    )
    return ConvState(**result["conv"])
