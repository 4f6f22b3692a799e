"""Accuracy of the offline persona realism rater on hand-written held-out cases (issue 47).

    /work/wt/bin/py benchmarks/persona_rater_accuracy.py [CASES.yaml]

Prints, per language and class (realistic, nonsense, assistant-speak, copied), how many cases
the heuristic rater put in the expected levels, and lists the misses. The cases are
``tests/judges/data/persona_rater_heldout.yaml``; ``tests/judges/test_persona_rater_heldout.py``
holds the rater to its floors.

Then the false alarms on model-written children's messages that are plainly messages: the KORA
scenarios' first user messages (``/work/shared/data/kora/scenarios.jsonl``, read in place when
present), each rated with its child's age: how many come out ``not`` realistic, and for which cue.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from branchpoint.scenarios.persona_rubric import rate_realism

CASES = Path(__file__).resolve().parents[1] / "tests/judges/data/persona_rater_heldout.yaml"
KORA = Path("/work/shared/data/kora/scenarios.jsonl")


def score(path: Path = CASES) -> list[dict[str, Any]]:
    """One row per language x class: cases, right, accuracy, misses (text, verdict)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    expect = data.pop("expect")
    rows = []
    for lang, classes in data.items():
        for cls, cases in classes.items():
            right, abstained, misses = 0, 0, []
            for case in cases:
                text, source = (
                    (case["text"], case["source"]) if isinstance(case, dict) else (case, None)
                )
                v = rate_realism(text, name="Maya", age=15, language=lang,
                                 sources=[source] if source else [])  # fmt: skip
                abstained += v.verdict is None
                if v.verdict in expect[cls]:
                    right += 1
                else:
                    misses.append((text, v.verdict, v.rationale))
            rows.append({"language": lang, "class": cls, "n": len(cases), "right": right,
                         "abstained": abstained, "accuracy": right / len(cases), "misses": misses})  # fmt: skip
    return rows


def kora_false_alarms(path: Path = KORA) -> tuple[int, dict[str, int]]:
    """Messages rated, and per verdict how many."""
    import json
    from collections import Counter

    counts: Counter[str] = Counter()
    n = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        v = rate_realism(row["firstUserMessage"], age=row["seed"].get("childAge"))
        counts[f"{v.verdict}: {v.rationale}" if v.verdict == "not" else str(v.verdict)] += 1
        n += 1
    return n, dict(counts)


def main() -> None:
    rows = score(Path(sys.argv[1]) if len(sys.argv) > 1 else CASES)
    print(f"{'language':8} {'class':10} {'n':>3} {'right':>5} {'no verdict':>10} {'accuracy':>8}")
    for r in rows:
        print(f"{r['language']:8} {r['class']:10} {r['n']:>3} {r['right']:>5} "
              f"{r['abstained']:>10} {r['accuracy']:>8.0%}")  # fmt: skip
    n, right = sum(r["n"] for r in rows), sum(r["right"] for r in rows)
    print(f"{'all':8} {'':10} {n:>3} {right:>5} {'':>10} {right / n:>8.0%}")
    for r in rows:
        for text, verdict, why in r["misses"]:
            print(f"miss {r['language']}/{r['class']}: {text!r} -> {verdict} ({why})")

    if KORA.exists():
        n, counts = kora_false_alarms()
        print(f"\nKORA first user messages rated (English rules): {n}")
        for verdict, k in sorted(counts.items(), key=lambda kv: -kv[1]):
            print(f"  {k:>4}  {verdict}")


if __name__ == "__main__":
    main()
