"""Tokens and dollars of a planned tree, low / expected / high.

Each call's input is the conversation so far, so it grows with the exchange: a target call at
exchange k reads its system prompt and k-1 earlier exchanges plus the persona's message; a
persona call reads its instructions and k-1 exchanges. Summed over a conversation that is
quadratic in its length. Message lengths are assumptions, stated here: low and expected are
typical lengths, high takes each side's ``max_tokens`` (or a long reply where none is set).

Prices come from litellm's price map (``litellm.model_cost``, read locally) unless the manifest
gives a price; local models (embedded, hf:, scripted:) cost nothing; a model with neither is
unpriced (None).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from simulator.sweep.calls import CallTally

CHARS_PER_TOKEN = 4
LOCAL_KINDS = ("embedded", "hf", "scripted")
# (low, expected) tokens of one message; high comes from max_tokens
PERSONA_MESSAGE = (10, 30)
TARGET_REPLY = (40, 150)
TARGET_REPLY_HIGH = 600  # when the target has no max_tokens
PERSONA_INSTRUCTIONS = 350  # the persona template with a scenario's persona, stage and options
LEVELS = ("low", "expected", "high")


@dataclass(frozen=True)
class Price:
    """USD per token."""

    input: float
    output: float


@dataclass
class Tokens:
    input: int = 0
    output: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output

    def add(self, other: Tokens) -> None:
        self.input += other.input
        self.output += other.output

    def usd(self, price: Price) -> float:
        return self.input * price.input + self.output * price.output


def price_of(spec: str, override: tuple[float, float] | None = None) -> Price | None:
    """The price of a model spec per token; ``override`` is USD per million (input, output)."""
    from simulator.specs import parse_spec

    if override is not None:
        return Price(override[0] / 1e6, override[1] / 1e6)
    parsed = parse_spec(spec)
    if parsed.kind in LOCAL_KINDS:
        return Price(0.0, 0.0)
    import litellm

    names = [parsed.model, parsed.model.split("/", 1)[-1]]
    for name in names:
        entry = litellm.model_cost.get(name)
        if entry and entry.get("input_cost_per_token") is not None:
            return Price(
                float(entry["input_cost_per_token"]), float(entry.get("output_cost_per_token") or 0)
            )
    return None


def message_lengths(level: str, persona_max: int | None, target_max: int | None) -> tuple[int, int]:
    """(persona message, target reply) tokens at ``level``."""
    if level == "high":
        return persona_max or PERSONA_MESSAGE[1] * 3, target_max or TARGET_REPLY_HIGH
    i = LEVELS.index(level)
    return PERSONA_MESSAGE[i], TARGET_REPLY[i]


def tokens_of(
    tally: CallTally,
    *,
    system_prompt: str | None,
    persona_tokens: int,
    reply_tokens: int,
) -> tuple[Tokens, Tokens]:
    """(target tokens, persona tokens) of the calls in ``tally``."""
    system = len(system_prompt or "") // CHARS_PER_TOKEN
    exchange_tokens = persona_tokens + reply_tokens
    target = _sum(
        tally.target, lambda k: system + (k - 1) * exchange_tokens + persona_tokens, reply_tokens
    )
    persona = _sum(
        tally.persona, lambda k: PERSONA_INSTRUCTIONS + (k - 1) * exchange_tokens, persona_tokens
    )
    return target, persona


def _sum(calls: Counter[int], input_at: Callable[[int], int], output: int) -> Tokens:
    out = Tokens()
    for exchange, n in calls.items():
        out.input += n * int(input_at(exchange))
        out.output += n * output
    return out
