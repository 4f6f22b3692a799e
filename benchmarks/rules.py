"""CPU per check of the bundled rules: the persona's role breaks (every persona message) and the
event rules (every chatbot reply), as one plain alternation and as ``branchpoint.core.patterns.any_of``.

    python benchmarks/rules.py

The texts are made here, of the lengths of real turns (a persona message of about 250
characters, chatbot replies of about 650 and 1,300), and match no rule, as nearly all turns do:
a scan then reads the whole text.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from branchpoint.core.patterns import any_of
from branchpoint.simulator.events import DEFAULT_PATTERNS
from branchpoint.simulator.persona import DEFAULT_ROLE_BREAKS

MESSAGE = (
    "idk, i just feel like nobody gets it. my mom keeps asking if im ok and i just say yeah. "
    "school is a lot rn and i cant sleep. "
) * 2
REPLY = (
    "That sounds like a lot to carry, and it makes sense that you'd feel worn out. Would it "
    "help to say more about what keeps you up at night? Sometimes writing down what is on your "
    "mind before bed makes it a little easier to switch off, and it can show you patterns. "
) * 3


def per_call_us(check: Callable[[str], object], text: str, seconds: float = 0.5) -> float:
    n, started = 0, time.process_time()
    while time.process_time() - started < seconds:
        for _ in range(100):
            check(text)
        n += 100
    return (time.process_time() - started) / n * 1e6


def plain(patterns: list[re.Pattern[str]], flags: int) -> Callable[[str], bool]:
    combined = re.compile("|".join(f"(?:{p.pattern})" for p in patterns), flags)
    return lambda text: combined.search(text) is not None


def _all(checks: list[Callable[[str], bool]]) -> Callable[[str], list[bool]]:
    return lambda text: [check(text) for check in checks]


def main() -> None:
    role_flags = re.IGNORECASE | re.MULTILINE
    role = [re.compile(p, role_flags) for _, p in DEFAULT_ROLE_BREAKS]
    events = {e: [re.compile(p, re.IGNORECASE) for p in ps] for e, ps in DEFAULT_PATTERNS.items()}
    cases = [
        ("role breaks", MESSAGE, [(role, role_flags)]),
        ("event rules", REPLY, [(ps, re.IGNORECASE) for ps in events.values()]),
        ("event rules", REPLY * 2, [(ps, re.IGNORECASE) for ps in events.values()]),
    ]
    print(f"{'rules':12} {'chars':>6} {'alternation':>12} {'any_of':>8}  speed-up")
    for name, text, sets in cases:
        before = per_call_us(_all([plain(ps, flags) for ps, flags in sets]), text)
        after = per_call_us(_all([any_of(ps, flags) for ps, flags in sets]), text)
        print(f"{name:12} {len(text):6d} {before:10.0f}us {after:6.0f}us  {before / after:.1f}x")


if __name__ == "__main__":
    main()
