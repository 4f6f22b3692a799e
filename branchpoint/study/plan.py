"""A sweep's plan: its run configs and trees, the cells done and to do, calls, tokens, dollars.

A manifest becomes one ``RunConfig`` per set of targets that share their params and key (a
conversation row records its target's params, so targets with different params are planned
apart), all under the sweep's run id, so every cell (variant x target x condition x simulator x
replicate) keeps one conversation id across re-runs. Planning reads the store only to count
the cells already done.

Besides calls, tokens and dollars (``calls.py``, ``costs.py``) the plan estimates the wall time
of the cells to do from the limits (``timing.py``) and, for every matched contrast of all the
cells, the smallest difference in failure rate detectable at 80% power (``detectable.py``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from branchpoint.core.errors import UserError
from branchpoint.core.yamlio import format_loc
from branchpoint.gateway.completion import GenParams
from branchpoint.gateway.pricing import (
    EXPECTED_CACHE_SHARE,
    PLAN_CACHE_SHARE,
    PerMtok,
    Price,
    Tokens,
    price_of,
)
from branchpoint.gateway.specs import parse_spec
from branchpoint.simulator.call_tally import CallTally, schedules, tree_calls
from branchpoint.study import detectable, timing
from branchpoint.study.costs import LEVELS, TARGET_REPLY_HIGH, TreeCost, tree_cost
from branchpoint.study.detectable import ContrastKey, ContrastPairs, count_pairs
from branchpoint.study.manifest import Manifest, ModelEntry, TargetEntry, scenario_paths
from branchpoint.study.timing import WallTime, Workload, latency_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from branchpoint.core.store import Store
    from branchpoint.core.yamlio import Loc
    from branchpoint.gateway.limits import ProviderLimits
    from branchpoint.scenarios.models import Scenario
    from branchpoint.simulator.plan import RunPlan, TreeSpec
    from branchpoint.simulator.run_config import RunConfig

DONE = ("completed", "failed")
# The most cells (variant x target x condition x simulator x replicate) a sweep may have: the
# plan holds a tree and a conversation id per cell, about 3.5 s and 40 MB per 100,000 cells on
# a loaded 2-core machine (benchmarks/plan_scale.py), so 200,000 plan in seconds and well under
# 500 MB. The bundled teen library's 198 variants x 1 target, condition and simulator x the
# schema's 1,000 replicates (198,000 cells) plan; a second target or condition is refused.
MAX_CELLS = 200_000
# event schedule counted for each estimate level (branchpoint/simulator/call_tally.py)
SCHEDULE_OF = {"low": "never", "expected": "midway", "high": "always"}


@dataclass
class TargetEstimate:
    """One target's share of the plan; calls and tokens cover its trees not yet finished."""

    target: str
    cells: int = 0
    done: int = 0
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    calls_independent: int = 0  # the same cells with every arm from scratch
    # of ``calls``, persona attempts after a turn's first (a broken character): high counts
    # every turn at its most attempts, low and expected none
    persona_retries: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    tokens: dict[str, Tokens] = field(default_factory=lambda: {k: Tokens() for k in LEVELS})
    usd: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0.0))


@dataclass
class JudgingEstimate:
    """One judge and rubric's share of the plan, for the cells still to do (made by
    ``branchpoint.study.judge_estimate``, which knows rubrics; the plan does not)."""

    label: str  # "SPEC / RUBRIC (when)"
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    tokens: dict[str, Tokens] = field(default_factory=lambda: {k: Tokens() for k in LEVELS})
    usd: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0.0))
    # what its wall time is estimated from: the judge's spec and params (its provider's limits)
    # and when it runs (live: while conversations still run; after: once they are all done)
    spec: str = ""
    params: GenParams | None = None
    when: str = "after"
    # ``usd`` is what the judge will be billed: at the batch price with ``batch``; ``usd_other``
    # is the same calls the other way (direct for a batch judge, batched for a direct one)
    batch: bool = False
    usd_other: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0.0))


@dataclass
class SweepPlan:
    sweep_id: str
    manifest: Manifest
    path: str
    runs: list[tuple[RunConfig, RunPlan]]
    targets: list[TargetEstimate]
    unpriced: list[str] = field(default_factory=list)  # model specs with no known price
    wall: WallTime | None = None  # for the trees not yet finished
    kinds: list[str] = field(default_factory=list)  # provider kinds the wall time assumed
    contrasts: dict[ContrastKey, ContrastPairs] = field(default_factory=dict)  # every cell's
    # the trees not finished, each with its calls at each level (what judging is estimated from)
    pending: list[tuple[RunPlan, TreeSpec, dict[str, CallTally]]] = field(default_factory=list)
    judging: list[JudgingEstimate] | None = (
        None  # None: not estimated (``branchpoint.study.judge_estimate``)
    )
    work: Workload | None = None  # the conversations' load, what ``wall`` was estimated from
    # The pre-registered analysis to store (identity.analysis_registration); None: register the
    # manifest's block as the sweep begins.
    analysis_registration: dict[str, Any] | None = None

    @property
    def scenario_hashes(self) -> dict[str, str]:
        """Scenario id -> content hash, of every planned tree."""
        return {t.scenario.id: t.scenario_hash for _, p in self.runs for t in p.trees}

    @property
    def cells(self) -> int:
        return sum(t.cells for t in self.targets)

    @property
    def done(self) -> int:
        return sum(t.done for t in self.targets)

    def total(self, what: str, level: str) -> float | None:
        if what == "calls":
            return sum(t.calls[level] for t in self.targets)
        values = [t.usd[level] for t in self.targets]
        values += [j.usd[level] for j in self.judging or []]
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    def attach_judging(self, judging: list[JudgingEstimate]) -> None:
        """Make ``judging`` (``branchpoint.study.judge_estimate``) part of the plan: its calls, costs and the
        wall time. Live judges' calls go through the conversations' limiters while trees still
        run; the judges after run once all are done, so their time adds to the conversations'."""
        self.judging = judging
        if self.work is None or not self.work.keys:
            return
        execution = self.manifest.execution
        live = copy.deepcopy(self.work)
        after = self.work.emptied() if any(e.when != "live" for e in judging) else None
        for est in judging:
            load = after if after is not None and est.when != "live" else live
            params = est.params or GenParams()
            latency = latency_of(parse_spec(est.spec).kind)
            for i, level in enumerate(LEVELS):
                load.add_calls(est.spec, params, level, est.calls[level], est.tokens[level].total)
                # the judging runner keeps ``concurrency`` units in flight (sweep_cmds)
                serial = est.calls[level] * latency[i]
                load.add_serial(-1, execution.concurrency, level, serial)
        self.wall = timing.estimate(live, after=after)
        self.kinds = sorted({k.kind for w in (live, after) if w for k in w.keys.values()})

    @property
    def judging_note(self) -> str:
        """Whether the USD figures hold the judges', for the plan and its question."""
        if self.judging is None:
            return "; judging not included"
        return "; judging included" if self.judging else ""  # [] : no judge calls a model

    @property
    def persona_retries(self) -> int:
        return max((p.persona_retries for _, p in self.runs), default=0)

    @property
    def uncapped(self) -> list[str]:
        """The targets that set no ``max_tokens``: their high is an assumption, not a bound."""
        return sorted(
            {t.target for _, p in self.runs for t in p.trees if t.target_params.max_tokens is None}
        )

    def _uncapped(self) -> list[str]:
        if not self.uncapped:
            return []
        return [
            f"high is not a bound for {', '.join(self.uncapped)}: no max_tokens, so its replies "
            f"are assumed at most {TARGET_REPLY_HIGH} tokens (set params.max_tokens to bound them)"
        ]

    def lines(self) -> list[str]:
        """The plan as the command prints it."""
        m = self.manifest
        out = [
            f"sweep {self.sweep_id}: {self.cells} cells ({self.done} done, "
            f"{self.cells - self.done} to do); {len(m.conditions)} condition(s), "
            f"{len(m.simulators)} simulator(s), {m.replicates} replicate(s)",
            "calls and USD are for trees not yet finished. low is a floor: no chatbot reply "
            "triggers an event branch point, every message is one token (a conversation that "
            "ends early, or calls answered from the cache, spend less); high: every reply "
            "triggers every event, replies run to max_tokens, every persona turn takes its "
            f"{self.persona_retries} retries (a broken character). Where a model has a cached "
            f"input rate, expected assumes {EXPECTED_CACHE_SHARE:.0%} of input tokens served by "
            "the provider's prompt cache, low all of them, high none",
            *self._uncapped(),
            f"{'target':34}{'cells':>7}{'done':>6}{'calls low':>11}{'expected':>10}{'high':>9}"
            f"{'no fork':>9}{'tokens (exp)':>14}{'USD low':>10}{'expected':>10}{'high':>10}",
        ]
        for t in self.targets:
            tok = t.tokens["expected"]
            out.append(
                f"{t.target[:33]:34}{t.cells:>7}{t.done:>6}{t.calls['low']:>11}"
                f"{t.calls['expected']:>10}{t.calls['high']:>9}{t.calls_independent:>9}"
                f"{tok.input + tok.output:>14}" + "".join(f"{_usd(t.usd[k]):>10}" for k in LEVELS)
            )
        calls = [int(self.total("calls", k) or 0) for k in LEVELS]
        independent = sum(t.calls_independent for t in self.targets)
        shared = (
            f"with forking, {independent} without"
            if any(t.fork == "shared" for _, p in self.runs for t in p.trees)
            else "every arm from scratch (fork: independent)"
        )
        out.append(
            f"model calls: {calls[0]} / {calls[1]} / {calls[2]} (low / expected / high) {shared}"
        )
        for j in self.judging or []:
            other = "direct" if j.batch else "batched"
            out.append(
                f"judging {j.label}: {j.calls['low']} / {j.calls['expected']} / {j.calls['high']} "
                f"calls, USD {'batched ' if j.batch else ''}"
                + " / ".join(_usd(j.usd[k]) for k in LEVELS)
                + f" ({other}: "
                + " / ".join(_usd(j.usd_other[k]) for k in LEVELS)
                + ")"
            )
        out.append(
            "USD: " + " / ".join(_usd(self.total("usd", k)) for k in LEVELS) + " (low / expected"
            f" / high{self.judging_note})"
        )
        if self.unpriced:
            out.append(f"unpriced (not in litellm's price map): {', '.join(self.unpriced)}")
        if self.wall is not None:
            out += timing.lines(self.wall, self.kinds)
        out += detectable.lines(self.contrasts, m.plan.base_rate, len(m.targets))
        if m.analysis is not None:
            trees = [t for _, p in self.runs for t in p.trees]
            targets = m.analysis.scope.targets or [t.spec for t in m.targets]
            conditions = m.analysis.scope.conditions or list(m.conditions)
            family = [(c.label(), detectable.primary_sizes(c, self.contrasts, trees, targets,
                                                           conditions))
                      for c in m.analysis.primary]  # fmt: skip
            out += detectable.primary_lines(m.analysis, family, m.plan.base_rate)
        return out


def _usd(value: float | None) -> str:
    return "unpriced" if value is None else f"{value:.2f}"


def run_configs(
    manifest: Manifest,
    path: str | Path,
    sweep_id: str,
    *,
    with_keys: bool = False,
) -> list[tuple[RunConfig, list[TargetEntry]]]:
    """One RunConfig per set of targets sharing params and key and set of simulators sharing
    params and key (a plan has one persona's params). Each config's limits are those of its
    targets and simulators, the detector's and the judges' (all of the sweep's gateways hold).

    A key never enters a config: params name its variable (``keyed_params``) and the provider
    reads it when it calls. ``with_keys`` (to run) checks every variable is set here, one
    positioned line each; on Ray the driver checks none: each worker reads its own where it runs
    (``branchpoint.study.worker_keys``)."""
    from branchpoint.simulator.run_config import RunConfig
    from branchpoint.study.manifest import read_keys

    m = manifest
    base = Path(path).resolve().parent
    paths = scenario_paths(m, base)
    if with_keys and m.execution.mode != "ray":
        read_keys(m)
    targets = _alike(m.targets, lambda e: e.params)
    simulators = _alike(m.simulators, m.simulator_params_of)
    shared = [
        *([m.detector] if m.detector else []),
        *(j for j in m.judges if j.spec != "heuristic"),
    ]
    out = []
    for entries in targets:
        for sims in simulators:
            config = RunConfig(
                scenarios=paths,
                targets=[e.spec for e in entries],
                target_params=keyed_params(entries[0].params, entries[0]),
                conditions=list(m.conditions),
                simulators=[e.spec for e in sims],
                simulator_params=keyed_params(m.simulator_params_of(sims[0]), sims[0]),
                detector=m.detector.spec if m.detector else None,
                detector_params=keyed_params(m.detector.params, m.detector) if m.detector else {},
                replicates=m.replicates,
                max_turns=m.max_exchanges,
                fork=m.fork,
                db=m.store,
                run_id=sweep_id,
                concurrency=m.execution.concurrency,
                limits=role_limits([*entries, *sims, *shared], m.execution.concurrency),
                seed=m.seed,
                realism_min=m.realism_min,
                persona_mode=m.persona.mode if m.persona is not None else None,
            )
            out.append((config, entries))
    return out


_E = TypeVar("_E", bound=ModelEntry)


def _alike(entries: list[_E], params_of: Callable[[_E], dict[str, Any]]) -> list[list[_E]]:
    """``entries`` in groups that share params and key, in order of first appearance."""
    groups: dict[str, list[_E]] = {}
    for entry in entries:
        key = json.dumps([params_of(entry), entry.key_env], sort_keys=True, default=str)
        groups.setdefault(key, []).append(entry)
    return list(groups.values())


def keyed_params(params: dict[str, Any], entry: ModelEntry) -> dict[str, Any]:
    """``params`` naming the entry's key variable (``api_key_env``): every provider reads the key
    from that variable when it calls (litellm, ``oai:``, batches), so the key itself is in no
    params, plan, Ray argument or store row, and the variable the manifest names is the one that
    authenticates (an ``api_key`` in params was dropped by the providers: litellm then fell back
    to OPENAI_API_KEY, another account's key)."""
    out = dict(params)
    if entry.key_env is not None:
        out["api_key_env"] = entry.key_env
    return out


def role_limits(entries: Iterable[ModelEntry], concurrency: int) -> dict[str, ProviderLimits]:
    """The manifest's limits of ``entries``, by spec, as a gateway takes them (an entry without
    limits is left to its provider's defaults; ``in_flight`` unset: the sweep's concurrency)."""
    from branchpoint.gateway.limits import ProviderLimits

    return {
        e.spec: ProviderLimits(
            max_concurrency=e.limits.in_flight or concurrency, rpm=e.limits.rpm, tpm=e.limits.tpm
        )
        for e in entries
        if e.limited
    }


def select_variants(manifest: Manifest, scenarios: list[Scenario]) -> list[str]:
    """The variant ids the manifest's filters keep ([] keeps all); unknown ids are an error."""
    from branchpoint.scenarios.variants import expand

    sel = manifest.scenarios
    if not sel.variants and not sel.exclude_variants:
        return []
    known = [v.id for s in scenarios for v in expand(s)]
    for field_name in ("variants", "exclude_variants"):
        for i, vid in enumerate(getattr(sel, field_name)):
            if vid not in known:
                raise UserError(
                    f"scenarios.{field_name}[{i}]: no variant {vid!r} in these scenarios "
                    "(see `branchpoint variants`)"
                )
    keep = [v for v in known if (not sel.variants or v in sel.variants)]
    kept = [v for v in keep if v not in sel.exclude_variants]
    if not kept:
        raise UserError("scenarios: the variant filters leave no variant to run")
    return kept


def plan_sweep(
    manifest: Manifest,
    path: str | Path,
    sweep_id: str,
    *,
    store: Store | None = None,
    with_keys: bool = False,
    retry_failed: bool = False,
) -> SweepPlan:
    """The plan of ``manifest`` under ``sweep_id`` (cells done counted from ``store``).

    ``retry_failed``: failed cells are to do again (``--retry-failed``), their trees estimated
    in full (an upper bound: the retry continues from their stored turns)."""
    from branchpoint.simulator.plan import load, plan_run

    configs = run_configs(manifest, path, sweep_id, with_keys=with_keys)
    scenarios = load(configs[0][0].scenarios)
    variants = select_variants(manifest, scenarios)
    _check_size(manifest, scenarios, variants)
    status = _statuses(store, sweep_id) if store is not None else {}
    done_states = ("completed",) if retry_failed else DONE
    runs: list[tuple[RunConfig, RunPlan]] = []
    estimates: dict[str, TargetEstimate] = {}
    _check_prices(manifest)
    prices = model_prices(manifest)
    limits = sweep_limits(configs)  # as the sweep's gateways will hold them
    work = Workload(limits, manifest.execution.concurrency)
    contrasts: dict[ContrastKey, ContrastPairs] = {}
    pending: list[tuple[RunPlan, TreeSpec, dict[str, CallTally]]] = []
    # Trees that differ only in replicate (or target, condition, simulator) make the same calls:
    # each shape is counted once (``_Shapes``) and each group of alike trees estimated once,
    # times its size, so the plan's time grows with the scenarios, not with the cells.
    shapes = _Shapes()
    groups: dict[tuple[object, ...], list[Any]] = {}
    for index, (config, _) in enumerate(configs):
        config.variants = variants
        plan = plan_run(config, scenarios=scenarios, run_id=sweep_id)
        runs.append((config, plan))
        count_pairs(plan.trees, contrasts)
        for tree in plan.trees:
            est = estimates.setdefault(tree.target, TargetEstimate(tree.target))
            finished = (
                sum(1 for a in tree.arms if status.get(a.conversation_id) in done_states)
                if status
                else 0
            )
            est.cells += len(tree.arms)
            est.done += finished
            if finished < len(tree.arms):
                shape = shapes.key(tree)
                tallies, _ = shapes.tallies(tree, shape)
                pending.append((plan, tree, tallies))
                alike = (index, tree.target, tree.simulator, tree.system_prompt, shape)
                groups.setdefault(alike, [index, shape, plan, tree, 0])[4] += 1
    for index, shape, plan, tree, n in groups.values():
        _estimate_trees(
            estimates[tree.target], tree, plan, prices, shapes, shape, n,
            detector=plan.detector, work=work, config=index,
        )  # fmt: skip
    unpriced = sorted({spec for spec, p in prices.items() if p is None})
    sweep = SweepPlan(
        sweep_id, manifest, str(path), runs, [estimates[t.spec] for t in manifest.targets]
    )
    sweep.unpriced = unpriced
    sweep.wall = timing.estimate(work) if work.keys else None  # None: nothing left to do
    sweep.work = work
    sweep.kinds = sorted({load.kind for load in work.keys.values()})
    sweep.contrasts = contrasts
    sweep.pending = pending
    _check_budget(sweep)
    return sweep


def _check_size(manifest: Manifest, scenarios: list[Scenario], variants: list[str]) -> None:
    """Refuse, with one positioned line, a sweep of more than ``MAX_CELLS`` cells: its plan
    (one tree and conversation id per cell, what the sweep executes) would take minutes and
    gigabytes, for a study no budget would run."""
    from branchpoint.scenarios.variants import expand

    kept = len(variants) if variants else sum(len(expand(s)) for s in scenarios)
    m = manifest
    cells = kept * len(m.targets) * len(m.conditions) * len(m.simulators) * m.replicates
    if cells > MAX_CELLS:
        raise UserError(
            m.located(
                ("replicates",),
                f"{kept} variants x {len(m.targets)} targets x {len(m.conditions)} conditions x "
                f"{len(m.simulators)} simulators x {m.replicates} replicates = {cells:,} cells "
                f"(expected at most {MAX_CELLS:,}: split the study into several sweeps)",
            )
        )


def sweep_limits(runs: Iterable[tuple[RunConfig, object]]) -> dict[str, ProviderLimits]:
    """The targets' limits of every run config, by spec: what the sweep's gateways hold."""
    return {k: v for config, _ in runs for k, v in config.limits.items()}


def model_prices(manifest: Manifest) -> dict[str, Price | None]:
    """USD per token of every model the manifest calls (None: unpriced): the price a role's
    entry gives (targets first, then simulators, the detector, the judges) over litellm's."""
    given: dict[str, PerMtok] = {}
    for _, entry in manifest.roles():
        if entry.price is not None:
            given.setdefault(entry.spec, entry.price.per_mtok())
    return {e.spec: price_of(e.spec, given.get(e.spec)) for _, e in manifest.roles()}


def _check_prices(manifest: Manifest) -> None:
    """One model, one price: two roles of one spec that give it different prices are refused
    (the gateway prices a call by its spec), one positioned line each."""
    first: dict[str, tuple[Loc, PerMtok]] = {}
    problems = []
    for loc, entry in manifest.roles():
        if entry.price is None:
            continue
        per_mtok = entry.price.per_mtok()
        seen = first.setdefault(entry.spec, (loc, per_mtok))
        if seen[1] != per_mtok:
            problems.append(
                manifest.located(
                    (*loc, "price"),
                    f"{entry.spec!r} is priced differently at {format_loc(seen[0])} (expected "
                    "one price per model)",
                )
            )
    if problems:
        raise UserError("\n".join(problems))


class _Shapes:
    """Each tree shape's call tallies, counted once (``branchpoint.simulator.call_tally.tree_calls``)."""

    def __init__(self) -> None:
        self._tallies: dict[tuple[object, ...], tuple[dict[str, CallTally], CallTally]] = {}

    @staticmethod
    def key(tree: TreeSpec) -> tuple[object, ...]:
        """What a tree's calls depend on: its scenario, its arms (variants, in order), its
        exchanges and fork mode; not its replicate, target, condition or simulator."""
        arms = tuple(sorted((a.order, a.variant_id) for a in tree.arms))
        return (tree.scenario_hash, arms, tree.max_turns, tree.fork)

    def tallies(
        self, tree: TreeSpec, shape: tuple[object, ...]
    ) -> tuple[dict[str, CallTally], CallTally]:
        """(calls at each level, calls with every arm from scratch) of ``tree``'s shape."""
        known = self._tallies.get(shape)
        if known is None:
            plans = schedules(tree)
            levels = {level: tree_calls(tree, plans[SCHEDULE_OF[level]]) for level in LEVELS}
            independent = tree_calls(tree, plans["never"], fork="independent")
            known = self._tallies[shape] = (levels, independent)
        return known


def _estimate_trees(
    est: TargetEstimate,
    tree: TreeSpec,
    plan: RunPlan,
    prices: dict[str, Price | None],
    shapes: _Shapes,
    shape: tuple[object, ...],
    n: int,
    *,
    detector: str | None,
    work: Workload | None = None,
    config: int = 0,
) -> None:
    """Add ``n`` trees alike to ``tree`` (same run config, target, simulator, system prompt and
    shape: the same calls and tokens) to ``est`` and ``work``."""
    tallies, independent = shapes.tallies(tree, shape)
    est.calls_independent += n * _count(independent, detector)
    simulator = tree.simulator or plan.simulator
    for level in LEVELS:
        cost = tree_cost(
            level,
            tallies[level],
            system_prompt=tree.system_prompt,
            persona_max=plan.persona_params.max_tokens,
            target_max=tree.target_params.max_tokens,
            persona_retries=plan.persona_retries,
            detector=bool(detector),
        )
        est.calls[level] += n * cost.calls
        est.persona_retries[level] += n * cost.persona_retries
        parts = [(tree.target, cost.target), (simulator, cost.persona)]
        if detector:
            parts.append((detector, cost.detector))
        usd = est.usd[level]
        for spec, tokens in parts:
            tokens = Tokens(tokens.input * n, tokens.output * n)
            est.tokens[level].add(tokens)
            price = prices.get(spec)
            cached = tokens.with_cache_share(PLAN_CACHE_SHARE[level])
            usd = None if usd is None or price is None else usd + cached.usd(price)
        est.usd[level] = usd
        if work is not None:
            _time_level(work, config, tree, plan, level, cost, n)


def _time_level(
    work: Workload,
    config: int,
    tree: TreeSpec,
    plan: RunPlan,
    level: str,
    cost: TreeCost,
    n: int = 1,
) -> None:
    """Add one level's calls, tokens and serial seconds of ``n`` trees alike to ``tree`` (each
    costing ``cost``) to ``work`` (sweep/timing.py)."""
    i = LEVELS.index(level)
    simulator = tree.simulator or plan.simulator
    n_target, n_persona = n * cost.target_calls, n * cost.persona_calls
    work.add_calls(tree.target, tree.target_params, level, n_target, n * cost.target.total)
    work.add_calls(simulator, plan.persona_params, level, n_persona, n * cost.persona.total)
    per_target = latency_of(parse_spec(tree.target).kind)[i]
    per_persona = latency_of(parse_spec(simulator).kind)[i]
    if plan.detector:
        work.add_calls(
            plan.detector, plan.detector_params, level, n * cost.detector_calls,
            n * cost.detector.total,
        )  # fmt: skip
        per_target += latency_of(parse_spec(plan.detector).kind)[i]
    serial = n_persona * per_persona + n_target * per_target
    work.add_serial(config, plan.concurrency, level, serial)
    # a conversation's calls are serial: its turns, each persona turn at its most attempts
    attempts = 1 + (plan.persona_retries if level == "high" else 0)
    work.add_chain(level, tree.max_turns * (attempts * per_persona + per_target))


def _count(tally: CallTally, detector: str | None) -> int:
    return tally.persona_calls + tally.target_calls * (2 if detector else 1)


def _statuses(store: Store, sweep_id: str) -> dict[str, str]:
    from branchpoint.core.read import run_conversations

    return {c.id: c.status for c in run_conversations(store, sweep_id)}


def _check_budget(plan: SweepPlan) -> None:
    """With a budget, every model must be priced: an unpriced one could spend without a bound."""
    m = plan.manifest
    if m.budget is None or not plan.unpriced:
        return
    spec = plan.unpriced[0]
    named = [((*loc, "price"), entry.spec) for loc, entry in m.roles()]
    where = next((loc for loc, named_spec in named if named_spec == spec), ("budget",))
    raise UserError(
        m.located(
            where,
            f"{spec!r} has no price in litellm's price map and a budget is set (expected "
            "price: {input_per_mtok: N, output_per_mtok: N} next to it)",
        )
    )
