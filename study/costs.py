"""Tokens and dollars of a planned tree, low / expected / high.

Each call's input is the conversation so far, so it grows with the exchange: a target call at
exchange k reads its system prompt and k-1 earlier exchanges plus the persona's message; a
persona call reads its instructions and k-1 exchanges. Summed over a conversation that is
quadratic in its length. Message lengths are assumptions, stated here: low and expected are
typical lengths, high takes each side's ``max_tokens`` (or a long reply where none is set).

Prices and the token counts that price themselves are the gateway's (``gateway/pricing.py``):
the rule for where a price comes from is written there once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from gateway.pricing import Tokens
from simulator.call_tally import CallTally

CHARS_PER_TOKEN = 4
# (low, expected) tokens of one message; high comes from max_tokens
PERSONA_MESSAGE = (10, 30)
TARGET_REPLY = (40, 150)
TARGET_REPLY_HIGH = 600  # when the target has no max_tokens
PERSONA_INSTRUCTIONS = 350  # the persona template with a scenario's persona, stage and options
LEVELS = ("low", "expected", "high")


def message_lengths(level: str, persona_max: int | None, target_max: int | None) -> tuple[int, int]:
    """(persona message, target reply) tokens at ``level``.

    A reply never exceeds its side's ``max_tokens``, so the typical lengths of low and expected
    are capped by it, and high is the cap itself: low <= expected <= high by construction."""
    high = (persona_max or PERSONA_MESSAGE[1] * 3, target_max or TARGET_REPLY_HIGH)
    if level == "high":
        return high
    i = LEVELS.index(level)
    return min(PERSONA_MESSAGE[i], high[0]), min(TARGET_REPLY[i], high[1])


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
