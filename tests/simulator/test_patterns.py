"""``branchpoint.core.patterns.any_of`` finds exactly what its patterns find one by one: the first-character
guard is an optimisation, never a filter that drops a match."""

from __future__ import annotations

import random
import re

import pytest

from branchpoint.core.patterns import _first_class, any_of
from branchpoint.simulator.events import DEFAULT_PATTERNS, RuleDetector
from branchpoint.simulator.persona import DEFAULT_ROLE_BREAKS

ROLE_FLAGS = re.IGNORECASE | re.MULTILINE

# Characters that case-fold onto ASCII letters under re.IGNORECASE (KELVIN SIGN, LONG S, dotted
# and dotless I), digits, spaces and the marks the patterns use.
ALPHABET = "aAeEiIkKsStTmMnN\u212a\u017f\u0130\u0131 \n\t0123456789'’*_#:,.!?-"
FRAGMENTS = [
    "as an AI",
    "I’m here for you",
    "I'm a chatbot",
    "language model",
    "\n**Assistant:** hi",
    "call 988",
    "x988x",
    "116 123",
    "741741",
    "text HOME to",
    "\u212aelvin",  # K as the KELVIN SIGN
    "\u017forry",  # s as LONG S
    "I can\u2019t help",
    "feel free to ask",
    "aa",
    "Ab",
    "7 pills",
]

TRICKY = [
    r"\bkelvin\b",
    r"\bsorry\b",
    r"(?<!\d)988(?!\d)",
    r"\d+ pills",  # starts with a category: a guard of its own
    r"[^a]b",  # a negated class: not guarded
    r".x",  # any character: not guarded
    r"a*",  # matches the empty string: not guarded
    r"(?:x|)y",  # an empty alternative
    r"(?i)ab",  # a global inline flag: the alternation rejects it
    r"(a)\1",  # a backreference: searched alone
    r"(?P<n>zz)",
    r"(?P<n>qq)",  # the same group name twice
    r"[a-c]ok",
    r"\sfoo",
    r"(?=t)text",  # a look-ahead consumes nothing
    r"^\s*[*_#]*\s*(assistant|bot)\s*:",
    r"(?>e)x",  # an atomic group
    r"i++m",  # a possessive repeat
]


def _texts(seed: int, n: int = 3000) -> list[str]:
    rng = random.Random(seed)
    out = [*FRAGMENTS, "", " "]
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.4:
                parts.append(rng.choice(FRAGMENTS))
            else:
                parts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12))))
        out.append("".join(parts))
    return out


PATTERN_SETS = {
    "role breaks": ([p for _, p in DEFAULT_ROLE_BREAKS], ROLE_FLAGS),
    **{event: (pats, re.IGNORECASE) for event, pats in DEFAULT_PATTERNS.items()},
    "tricky": (TRICKY, re.IGNORECASE),
    "tricky, multiline": (TRICKY, ROLE_FLAGS),
    "tricky, case-sensitive": ([p for p in TRICKY if "(?i)" not in p], 0),
}


@pytest.mark.parametrize("name", list(PATTERN_SETS))
def test_any_of_finds_what_the_patterns_find_one_by_one(name: str) -> None:
    sources, flags = PATTERN_SETS[name]
    patterns = [re.compile(p, flags) for p in sources]
    found = any_of(patterns, flags)
    for text in _texts(seed=len(name)):
        assert found(text) == any(p.search(text) for p in patterns), (name, text)
    # and each pattern alone, so that a match no other pattern shares is not lost
    for pattern in patterns:
        alone = any_of([pattern], flags)
        for text in FRAGMENTS:
            assert alone(text) == bool(pattern.search(text)), (pattern.pattern, text)


def test_case_folded_letters_pass_the_guard() -> None:
    for flags in (re.IGNORECASE, ROLE_FLAGS):
        assert any_of([re.compile(r"\bkelvin\b", flags)], flags)("\u212aelvin")
        assert any_of([re.compile(r"\bsorry", flags)], flags)("I'm \u017forry")
    assert not any_of([re.compile(r"\bkelvin\b")], 0)("\u212aelvin")


def test_every_bundled_rule_is_guarded() -> None:
    # The speed of role-break and event checks rests on it (benchmarks/rules.py measures it).
    for _, pattern in DEFAULT_ROLE_BREAKS:
        assert _first_class(pattern, ROLE_FLAGS) is not None, pattern
    for pats in DEFAULT_PATTERNS.values():
        for pattern in pats:
            assert _first_class(pattern, re.IGNORECASE) is not None, pattern
    assert _first_class(r".x", 0) is None
    assert _first_class(r"a*", 0) is None
    assert _first_class(r"[^a]b", 0) is None


def test_the_rule_detector_reports_what_its_patterns_find() -> None:
    detector = RuleDetector({"limit": [r"\bcan(not|'t) help\b", r"(a)\1", r"(?i)x"]})
    for reply in ["I can't help with that", "aa", "nothing here", "Call 988 now", "X"]:
        one_by_one = [
            e for e, pats in detector.patterns.items() if any(p.search(reply) for p in pats)
        ]
        assert detector.events_in(reply) == one_by_one
