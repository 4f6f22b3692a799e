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
    fixed: Sequence[bool] = (),
    min_width: int = MIN_WIDTH,
) -> list[int]:
    """Widths no wider than ``natural`` whose sum (with padding) fits ``available`` columns: the
    widest flexible column loses a column at a time until the row fits (or all are at
    ``min_width``)."""
    widths = list(natural)
    room = available - SCROLLBAR - CELL_PADDING * len(widths)
    flexible = [i for i in range(len(widths)) if not (fixed[i] if i < len(fixed) else False)]
    while sum(widths) > room:
        shrinkable = [i for i in flexible if widths[i] > min_width]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
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
