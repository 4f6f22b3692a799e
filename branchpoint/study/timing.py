"""A sweep's wall time, low / expected / high, from its planned calls, its limits and latencies.

Three things bound how fast a sweep can go, and the estimate is the largest of them:

* each provider's limits, as the gateway resolves them (``Gateway._limiter``: the limits given
  for the spec, its limit key, its prefix or ``*``, else the provider's default: a local model's
  batch size, or the sweep's ``execution.concurrency`` for an API). With C calls and T tokens
  through one limiter, L calls in flight, R requests/min and M tokens/min, and l seconds a call:
  wall >= C * l / L, wall >= 60 C / R, wall >= 60 T / M;
* a conversation's calls are serial (persona, then target, then the detector, exchange after
  exchange) and each run config grows at most ``execution.concurrency`` groups at once: with S
  the serial seconds of all its groups (each group's calls times their latencies), wall >= S / G;
  for uniform conversations that is calls per conversation x latency x conversations / G;
* and no sweep is shorter than its longest conversation: max_exchanges x the latency of one
  exchange.

Judging (``SweepPlan.attach_judging``) counts the same way, its units in flight as the sweep's
concurrency: a live judge's calls are added to the conversations' load, and the judges that run
after them add their own wall time to it.

Latencies are stated assumptions (``LATENCY_S``, seconds per call, low / expected / high), per
provider kind; an API provider not listed gets ``API_LATENCY_S``. The low estimate takes the low
call count and the low latency, the high one the high of both. Retries, 429 cool-downs and
persona retries are not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from branchpoint.study.costs import LEVELS

if TYPE_CHECKING:
    from branchpoint.gateway.completion import GenParams
    from branchpoint.gateway.limits import ProviderLimits

# Seconds per call (low, expected, high), by provider kind. An HTTP API: 1 to 10 s for a chat
# reply of a few hundred tokens. The embedded model on CPU, 8 in flight: about 60 tokens/s in all
# (benchmarks/local_batching.py), so 10 s for a 150-token reply. A local hf: model on a GPU.
LATENCY_S: dict[str, tuple[float, float, float]] = {
    "scripted": (0.0, 0.0, 0.0),
    "embedded": (4.0, 10.0, 20.0),
    "hf": (0.5, 2.0, 10.0),
}
API_LATENCY_S = (1.0, 3.0, 10.0)
# Kinds whose provider holds its own batch size (it wins over the sweep's concurrency).
LOCAL_BATCHED = ("embedded", "hf")


def latency_of(kind: str) -> tuple[float, float, float]:
    return LATENCY_S.get(kind, API_LATENCY_S)


@dataclass
class KeyLoad:
    """The calls and tokens through one limiter, at each level."""

    key: str
    kind: str
    limits: ProviderLimits
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))

    def bounds(self, level: str) -> list[tuple[float, str]]:
        i = LEVELS.index(level)
        calls, out = self.calls[level], []
        lim = self.limits
        out.append((calls * latency_of(self.kind)[i] / lim.max_concurrency, "in flight"))
        if lim.rpm:
            out.append((60 * calls / lim.rpm, "requests/min"))
        if lim.tpm:
            out.append((60 * self.tokens[level] / lim.tpm, "tokens/min"))
        return [(s, f"{self.key} {what}") for s, what in out]


@dataclass
class Workload:
    """What the wall-time estimate needs, accumulated tree by tree while a sweep is planned."""

    limits: Mapping[str, ProviderLimits]
    default_concurrency: int
    keys: dict[str, KeyLoad] = field(default_factory=dict)
    # (spec, api_base) -> limit key: the built-in kinds key on nothing else, and resolving
    # once a spec keeps planning 30,000 trees cheap
    _resolved: dict[tuple[str, str | None], str] = field(default_factory=dict)
    # run config index (-1: judging) -> (groups in flight, serial seconds at each level)
    serial: dict[int, tuple[int, dict[str, float]]] = field(default_factory=dict)
    longest: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0.0))

    def add_calls(self, spec: str, params: GenParams, level: str, calls: int, tokens: int) -> None:
        memo = (spec, params.api_base)
        key = self._resolved.get(memo)
        if key is None:
            key, kind, limits = resolve_limits(spec, params, self.limits, self.default_concurrency)
            self._resolved[memo] = key
            self.keys.setdefault(key, KeyLoad(key, kind, limits))
        load = self.keys[key]
        load.calls[level] += calls
        load.tokens[level] += tokens

    def emptied(self) -> Workload:
        """No calls, the same limiters: a later pass (judging after the conversations) whose
        calls to a provider key the conversations used meet that key's limits."""
        out = Workload(self.limits, self.default_concurrency)
        out._resolved = dict(self._resolved)
        out.keys = {k: KeyLoad(k, load.kind, load.limits) for k, load in self.keys.items()}
        return out

    def add_serial(self, config: int, groups: int, level: str, seconds: float) -> None:
        entry = self.serial.setdefault(config, (groups, dict.fromkeys(LEVELS, 0.0)))
        entry[1][level] += seconds

    def add_chain(self, level: str, seconds: float) -> None:
        self.longest[level] = max(self.longest[level], seconds)


@dataclass
class WallTime:
    seconds: dict[str, float]
    bound_by: dict[str, str]  # level -> what binds


def resolve_limits(
    spec: str, params: GenParams, limits: Mapping[str, ProviderLimits], default_concurrency: int
) -> tuple[str, str, ProviderLimits]:
    """(limit key, provider kind, limits) of a call, as the gateway's ``_limiter`` resolves them."""
    from branchpoint.gateway.limits import ProviderLimits
    from branchpoint.gateway.providers.registry import provider_kind
    from branchpoint.gateway.specs import parse_spec

    parsed = parse_spec(spec)
    kind = provider_kind(parsed.kind)
    key = kind.key(parsed.model, params)
    found = limits.get(parsed.raw) or limits.get(key) or limits.get(parsed.kind) or limits.get("*")
    if found is None:
        batched = parsed.kind in LOCAL_BATCHED
        found = ProviderLimits(
            max_concurrency=kind.default_concurrency
            if batched
            else default_concurrency or kind.default_concurrency
        )
    return key, parsed.kind, found


def estimate(work: Workload, after: Workload | None = None) -> WallTime:
    """The wall time of ``work``, and of ``after`` (judging once the conversations are done)
    after it."""
    first = _estimate(work)
    if after is None or not after.keys:
        return first
    then = _estimate(after)
    return WallTime(
        {level: first.seconds[level] + then.seconds[level] for level in LEVELS},
        {
            level: f"{first.bound_by[level]}, then judging by {then.bound_by[level]}"
            for level in LEVELS
        },
    )


def _estimate(work: Workload) -> WallTime:
    seconds: dict[str, float] = {}
    bound_by: dict[str, str] = {}
    for level in LEVELS:
        bounds: list[tuple[float, str]] = [(work.longest[level], "the longest conversation")]
        for load in work.keys.values():
            bounds += load.bounds(level)
        for config, (groups, serial) in work.serial.items():
            what = "judging units" if config < 0 else "conversation groups"
            bounds.append((serial[level] / groups, f"{groups} {what} in flight"))
        best = max(bounds, key=lambda b: b[0])
        seconds[level], bound_by[level] = best
    return WallTime(seconds, bound_by)


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def lines(wall: WallTime, kinds: list[str]) -> list[str]:
    """The estimate as the plan prints it, with the latencies it assumed."""
    fig = " / ".join(duration(wall.seconds[k]) for k in LEVELS)
    assumed = ", ".join(
        f"{kind} {'/'.join(f'{s:g}' for s in latency_of(kind))}" for kind in dict.fromkeys(kinds)
    )
    return [
        f"wall time: {fig} (low / expected / high), expected bound by {wall.bound_by['expected']}",
        f"  assumed seconds a call (low/expected/high): {assumed}; a conversation's calls are "
        "serial; retries and 429 cool-downs not counted",
    ]
