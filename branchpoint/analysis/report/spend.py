"""The report's section on what the runs' model calls cost: per role and model, the calls, the
input tokens, the share of them a provider's prompt cache served (billed at its cached rate),
and the USD recorded; calls with no price known are said to be unpriced, never $0."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from branchpoint.analysis.report.sections import Section

INTRO = (
    "What the recorded model calls cost, by role and model. 'cached' is the share of input "
    "tokens a provider's prompt cache served, as the provider reported it (billed at its "
    "cached rate, which the recorded cost uses); '-' where no call reported it. A model with "
    "no price known is 'unpriced': its calls are not counted at $0."
)


def spend_section(store_or_db: Any, runs: Sequence[str] | None) -> list[Section]:
    """The section, or nothing when the runs recorded no model call."""
    from branchpoint.core.read import cache_share, call_spend
    from branchpoint.core.read.costs import share_text

    rows = call_spend(store_or_db, runs)
    if rows.empty:
        return []
    shown = pd.DataFrame(
        {
            "role": rows["role"],
            "model": rows["model"],
            "calls": rows["calls"].astype(int),
            "input tokens": rows["input_tokens"].astype(int),
            "cached": [
                share_text(cache_share(int(s), int(o)))
                for s, o in zip(rows["cached_tokens"], rows["reported_input"], strict=True)
            ],
            "USD": [
                "unpriced" if int(n) else f"{float(u):.4f}"
                for u, n in zip(rows["usd"], rows["unpriced"], strict=True)
            ],
        }
    )
    served, of = int(rows["cached_tokens"].sum()), int(rows["reported_input"].sum())
    text = [INTRO]
    share = cache_share(served, of)
    if share is not None:
        text.append(
            f"A provider's prompt cache served {served:,} of {of:,} input tokens "
            f"({share:.0%}) of the calls that report it."
        )
    return [Section("Model calls and cost", text=text, tables=[("By role and model", shown)])]
