"""Counting a tree's model calls from its plan, by replaying the engine's grouping and forking.

The engine (branchpoint/simulator/graph.py ``route``, branchpoint/simulator/tree.py ``fork``) runs arms that agree in one
group; before each exchange the branch points that fire are those whose ``at_turn`` is the next
exchange and those whose ``on_event`` the last chatbot reply showed; a group whose arms hold
different options for a fired branch point splits into one group per option. Every exchange of a
group costs one target call, and one persona call except the first (the opening is verbatim), and
one detector call per target call when a detector model is set.

``at_turn`` forks are known from the plan; ``on_event`` forks depend on the chatbot's replies, so
the count takes an event schedule: the events every reply of a given exchange shows. The plan
counts three: ``never`` (no reply shows an event: fewest calls), ``midway`` (events from the
middle exchange on) and ``always`` (every reply shows every event: each event branch point forks
at its first chance, the most calls). Persona retries on a broken character are not counted here;
the plan adds them to its high (``branchpoint.study.costs.tree_cost``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from branchpoint.simulator.plan import Arm, TreeSpec

# exchange -> the events the chatbot's reply at that exchange shows
EventSchedule = Callable[[int], frozenset[str]]


@dataclass
class CallTally:
    """Calls by purpose, and the exchange of each (what the token estimate needs)."""

    persona: Counter[int] = field(default_factory=Counter)  # exchange -> persona calls
    target: Counter[int] = field(default_factory=Counter)  # exchange -> target calls

    @property
    def persona_calls(self) -> int:
        return sum(self.persona.values())

    @property
    def target_calls(self) -> int:
        return sum(self.target.values())

    def add(self, other: CallTally) -> None:
        self.persona.update(other.persona)
        self.target.update(other.target)


def schedules(tree: TreeSpec) -> dict[str, EventSchedule]:
    """The three event schedules a plan counts (see the module docstring)."""
    events = frozenset(
        bp.trigger.on_event for bp in tree.scenario.branch_points if bp.trigger.on_event
    )
    middle = max(1, (tree.max_turns + 1) // 2)
    return {
        "never": lambda exchange: frozenset(),
        "midway": lambda exchange: events if exchange >= middle else frozenset(),
        "always": lambda exchange: events,
    }


def tree_calls(tree: TreeSpec, events_at: EventSchedule, *, fork: str | None = None) -> CallTally:
    """The calls growing ``tree`` makes under ``events_at`` (``fork`` overrides the tree's)."""
    from branchpoint.scenarios.variants import render_opening

    mode = fork or tree.fork
    arms = sorted(tree.arms, key=lambda a: a.order)
    if mode == "independent":
        groups: list[list[Arm]] = [[a] for a in arms]
    else:
        by_opening: dict[str, list[Arm]] = {}
        for arm in arms:
            by_opening.setdefault(render_opening(tree.scenario, arm.variant), []).append(arm)
        groups = list(by_opening.values())
    tally = CallTally()
    work: list[tuple[list[Arm], int]] = [(g, 0) for g in groups]
    while work:
        group, exchange = work.pop()
        while exchange < tree.max_turns:
            fired = _fired(tree, exchange, events_at)
            split = [b for b in fired if len({_option(tree, a, b) for a in group}) > 1]
            if split:
                work += [(g, exchange) for g in _partition(tree, group, split)]
                break
            exchange += 1
            if exchange > 1:
                tally.persona[exchange] += 1
            tally.target[exchange] += 1
    return tally


def _fired(tree: TreeSpec, exchange: int, events_at: EventSchedule) -> list[str]:
    """Branch points that fire before exchange ``exchange + 1`` (graph.fired_next, by schedule)."""
    shown = events_at(exchange) if exchange > 0 else frozenset()
    return [
        bp.id
        for bp in tree.scenario.branch_points
        if (bp.trigger.on_event and bp.trigger.on_event in shown)
        or bp.trigger.at_turn == exchange + 1
    ]


def _option(tree: TreeSpec, arm: Arm, bp_id: str) -> str:
    # As GroupContext.option_of: an arm without a choice for a branch point holds its baseline.
    chosen = arm.choices.get(bp_id)
    return chosen if chosen is not None else tree.scenario.branch_point(bp_id).baseline


def _partition(tree: TreeSpec, group: Sequence[Arm], split: list[str]) -> list[list[Arm]]:
    out: dict[tuple[str, ...], list[Arm]] = {}
    for arm in group:
        out.setdefault(tuple(_option(tree, arm, b) for b in split), []).append(arm)
    return list(out.values())
