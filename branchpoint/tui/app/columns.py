"""Column widths of a table sized to the terminal and to what the cells hold, and the
distinguishing part of values that share most of their text (choices, target names).

At 160 columns every column gets the width its longest cell needs; at 80 the widest columns give
way first, so that no column vanishes and short ones (failures, status) are never cut.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

CELL_PADDING = 2  # a DataTable cell's padding, left and right
SCROLLBAR = 2
MIN_WIDTH = 6


def fit_widths(
    natural: Sequence[int],
    available: int,
    *,
    keep: Sequence[int] = (),
    wants: Sequence[int] = (),
    min_width: int = MIN_WIDTH,
) -> list[int]:
    """Widths no wider than ``natural`` whose sum (with padding) fits ``available`` columns.

    ``keep`` ranks the columns (default 0; higher gives way later; -1 never shrinks): the widest
    column of the lowest rank loses a column at a time, down to ``min_width``, before the next
    rank gives any (so the distinguishing columns stay readable at 80 columns). Room left over
    then widens the columns that ``wants`` wider (a long heading), in order."""
    widths = list(natural)
    ranks = [keep[i] if i < len(keep) else 0 for i in range(len(widths))]
    room = available - SCROLLBAR - CELL_PADDING * len(widths)
    for rank in sorted({r for r in ranks if r >= 0}):
        while sum(widths) > room:
            shrinkable = [
                i for i in range(len(widths)) if ranks[i] == rank and widths[i] > min_width
            ]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: widths[i])
            widths[widest] -= 1
    for i, want in enumerate(wants):
        spare = room - sum(widths)
        if i < len(widths) and want > widths[i] and spare > 0:
            widths[i] += min(spare, want - widths[i])
    return widths


def common_prefix(values: Sequence[str], separators: str = ":/") -> str:
    """The longest prefix that all ``values`` share, cut back to just after a separator (so that
    ``scripted:target0`` and ``scripted:target1`` share ``scripted:``); "" for one value."""
    if len(set(values)) < 2:
        return ""
    first, last = min(values), max(values)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    prefix = first[:n]
    cut = max(prefix.rfind(s) for s in separators)
    return prefix[: cut + 1] if cut >= 0 else ""


def usual_choices(rows: Sequence[Mapping[str, object]]) -> dict[str, str]:
    """Per branch point, the option most rows take (ties: the first in option order); none for a
    single row, which is then shown whole."""
    out: dict[str, str] = {}
    if len(rows) < 2:
        return out
    keys = sorted({k for r in rows for k in r})
    for key in keys:
        counts = Counter(str(r.get(key)) for r in rows if key in r)
        out[key] = min(counts, key=lambda v: (-counts[v], v))
    return out


def distinguishing_choices(choices: Mapping[str, object], usual: Mapping[str, str]) -> str:
    """``choices`` without the options that most rows share: what tells this arm apart."""
    parts = [f"{k}={v}" for k, v in sorted(choices.items()) if usual.get(k) != str(v)]
    return " ".join(parts) if parts else "(usual)"
