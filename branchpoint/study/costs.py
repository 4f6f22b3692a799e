"""Tokens and dollars of a planned tree, low / expected / high.

Each call's input is the conversation so far, so it grows with the exchange: a target call at
exchange k reads its system prompt and k-1 earlier exchanges plus the persona's message; a
persona call reads its instructions and k-1 exchanges. Summed over a conversation that is
quadratic in its length.

The three levels say different things (``tree_cost`` applies them):

- *low* is a floor, not a typical figure: replies can be a single token, so it counts what no
  reply can take away, one token for each non-empty message a call sends (the persona's messages,
  its instructions, the system prompt) and one output token a persona reply (an empty one is
  retried). A typical short reply would be an estimate, and a chatbot that answers in fifteen
  tokens spent less than that (issue 33).
- *expected* uses typical message lengths (``PERSONA_MESSAGE``, ``TARGET_REPLY``), capped by
  each side's ``max_tokens``.
- *high* takes each side's ``max_tokens`` (``TARGET_REPLY_HIGH`` where a target sets none: an
  assumption, which the plan says) and every persona turn at its most attempts (a reply that
  breaks character is retried up to ``persona_retries`` times, each attempt reading the turn's
  input and a corrective note).

Counts of characters become tokens at ``CHARS_PER_TOKEN``. Prices and the token counts that
price themselves are the gateway's (``branchpoint/gateway/pricing.py``): the rule for where a price comes
from is written there once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from branchpoint.gateway.pricing import Tokens
from branchpoint.simulator.call_tally import CallTally

CHARS_PER_TOKEN = 4
# (low, expected) tokens of one message: low is the floor, one token a non-empty message
PERSONA_MESSAGE = (1, 30)
TARGET_REPLY = (0, 150)  # a chatbot's reply may be empty
TARGET_REPLY_HIGH = 600  # when the target has no max_tokens
PERSONA_INSTRUCTIONS = 350  # the persona template with a scenario's persona, stage and options
# a corrective note a persona retry adds to its input (branchpoint/simulator/persona.py: the reason)
CORRECTION_TOKENS = 60
LEVELS = ("low", "expected", "high")


def message_lengths(level: str, persona_max: int | None, target_max: int | None) -> tuple[int, int]:
    """(persona message, target reply) tokens at ``level``.

    A reply never exceeds its side's ``max_tokens``, so the lengths of low and expected are
    capped by it, and high is the cap itself: low <= expected <= high by construction."""
    high = (persona_max or PERSONA_MESSAGE[1] * 3, target_max or TARGET_REPLY_HIGH)
    if level == "high":
        return high
    i = LEVELS.index(level)
    return min(PERSONA_MESSAGE[i], high[0]), min(TARGET_REPLY[i], high[1])


@dataclass
class TreeCost:
    """One tree's calls and tokens at one level, by role."""

    persona_calls: int = 0
    target_calls: int = 0
    detector_calls: int = 0
    persona_retries: int = 0  # of the persona calls, attempts after a turn's first (high only)
    target: Tokens = field(default_factory=Tokens)
    persona: Tokens = field(default_factory=Tokens)
    detector: Tokens = field(default_factory=Tokens)

    @property
    def calls(self) -> int:
        return self.persona_calls + self.target_calls + self.detector_calls


def tree_cost(
    level: str,
    tally: CallTally,
    *,
    system_prompt: str | None,
    persona_max: int | None,
    target_max: int | None,
    persona_retries: int,
    detector: bool,
) -> TreeCost:
    """The calls and tokens of ``tally`` (one tree's calls at ``level``) by the module's rules."""
    persona_len, reply_len = message_lengths(level, persona_max, target_max)
    floor = level == "low"
    system = (1 if system_prompt else 0) if floor else len(system_prompt or "") // CHARS_PER_TOKEN
    instructions = 1 if floor else PERSONA_INSTRUCTIONS
    exchange = persona_len + reply_len
    attempts = 1 + (persona_retries if level == "high" else 0)
    correction = CORRECTION_TOKENS if level == "high" else 0
    out = TreeCost(
        persona_calls=attempts * tally.persona_calls,
        target_calls=tally.target_calls,
        detector_calls=tally.target_calls if detector else 0,
        persona_retries=(attempts - 1) * tally.persona_calls,
    )
    out.target = _sum(tally.target, lambda k: system + (k - 1) * exchange + persona_len, reply_len)
    # the first attempt reads the turn's input; each retry that input and a corrective note
    out.persona = _sum(
        tally.persona,
        lambda k: attempts * (instructions + (k - 1) * exchange) + (attempts - 1) * correction,
        attempts * persona_len,
    )
    if detector:
        # The detector reads its instructions and the reply: two non-empty messages at the floor;
        # above it, the target's tokens (more than it reads: the whole conversation) bound it.
        out.detector = (
            Tokens(2 * tally.target_calls, 0)
            if floor
            else Tokens(out.target.input, out.target.output)
        )
    return out


def _sum(calls: Counter[int], input_at: Callable[[int], int], output: int) -> Tokens:
    out = Tokens()
    for exchange, n in calls.items():
        out.input += n * int(input_at(exchange))
        out.output += n * output
    return out
