"""Time to the first failure of one analysis: Kaplan-Meier summaries per target and per arm,
and each branch option matched with its baseline arm (``compare``). Computed once, by the
analysis pipeline, from the judgment rows it has already read; ``branchpoint analyze`` and the
report's section (``section``) both show this result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from branchpoint.analysis.contrasts.matched import (
    PAIR_KEYS,
    candidate_pairs,
    pairing_of,
    resolve_baselines,
    text_levels,
)
from branchpoint.analysis.pairing.forks import rated_rows
from branchpoint.analysis.survival.compare import (
    CURVE_KEYS,
    conversation_pairs,
    km_summary,
    matched_time_to_failure,
)
from branchpoint.analysis.survival.first_failure import first_failures
from branchpoint.analysis.tables.judgments import choice_column, choice_columns
from branchpoint.core.read.units import copied_conversations
from branchpoint.core.words import counted

NO_TURNS = "No judged chatbot turns: no time to a first failure to show."
NO_PPF = (
    "No pass/partial/fail verdicts (risk levels have no failing verdict to time): no time to a "
    "first failure to show."
)
NO_RATED = (
    "Every verdict is an error or not applicable: no rated turn, so no time to a first failure "
    "to show."
)
# What the matched comparison reads of the first failures: a slim frame is reindexed per group
# much faster than one that carries every design column.
_MATCHED_COLS = [*CURVE_KEYS, "conversation_id", "time", "event"]


@dataclass
class TimeToFailure:
    """The section's tables (``compare``'s frames); ``why_empty``: why there is nothing to show."""

    first_failures: pd.DataFrame = field(default_factory=pd.DataFrame)  # any criterion
    copies: frozenset[str] = frozenset()  # arms that never forked (their parent stored again)
    per_target: pd.DataFrame = field(default_factory=pd.DataFrame)
    per_arm: pd.DataFrame = field(default_factory=pd.DataFrame)  # empty with one arm
    matched: pd.DataFrame = field(default_factory=pd.DataFrame)  # branch option vs baseline
    why_empty: str = ""

    @property
    def own(self) -> pd.DataFrame:
        """The first failures of conversations of their own (copies left out): per target."""
        ff = self.first_failures
        return ff[~ff["conversation_id"].isin(self.copies)] if not ff.empty else ff

    def counts_line(self) -> str:
        """How many conversations the per-target table counts, and the failures in it."""
        own = self.own
        kept = f" ({len(self.copies)} arms that never forked counted once)" if self.copies else ""
        n, failed = own["conversation_id"].nunique(), int(own["event"].sum())
        return (
            f"{counted(n, 'conversation')}{kept}; per judge, "
            f"{counted(failed, 'conversation x judge row')} with a failure."
        )


def branch_option_pairs(data: Any, baselines: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Each branch option's arm and its baseline arm, one row per pair of conversations, with
    ``contrast`` and ``condition`` (the matched contrasts' pairing: same run, scenario, target,
    condition, simulator, replicate and other choices; never-forked pairs and copies left out).
    ``data``: what ``pairing_of`` takes (a judgment table, its conversation x criterion counts,
    or the store's post-fork counts, whose pairing the contrasts have already made);
    ``baselines``: as the matched contrasts take them (``--baseline``)."""
    p, _notes = pairing_of(data)
    base = resolve_baselines(p.cc, baselines)
    parts = []
    cols = choice_columns(p.cc)
    for bp, baseline, _src in base.itertuples(index=False):
        col = choice_column(bp)
        match = [*PAIR_KEYS, *[c for c in cols if c != col]]
        for opt in text_levels(p.cc[col]):
            if opt == baseline:
                continue
            cand = candidate_pairs(p.cc, col, baseline, opt, match, p.enc, turns=p.turns,
                                   tree=p.tree)  # fmt: skip
            pairs = conversation_pairs(cand, ["condition"])
            if not pairs.empty:
                parts.append(pairs.assign(contrast=f"{bp}: {baseline} → {opt}"))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def time_to_failure(
    judgments: pd.DataFrame, paired: Any = None, baselines: Mapping[str, str] | None = None
) -> TimeToFailure:
    """``judgments``: a judgment table with the fork tree (``parent_id``, ``fork_turn``) and each
    conversation's ``stop_reason`` (``first_failure.with_endings``). ``paired``: the data the
    matched contrasts paired (default: ``judgments``); its pairs are the branch options', each
    against the baseline the contrasts use (``baselines``)."""
    jt = judgments[judgments["exchange"].notna()] if "exchange" in judgments else judgments
    if jt.empty:
        return TimeToFailure(why_empty=NO_TURNS)
    ff = first_failures(jt, criteria=False)
    if ff.empty:
        return TimeToFailure(why_empty=NO_PPF if rated_rows(jt).any() else NO_RATED)
    out = TimeToFailure(ff, frozenset(copied_conversations(jt)))
    out.per_target = km_summary(out.own, ["target"])
    if ff["arm"].nunique() > 1:
        out.per_arm = km_summary(ff, ["arm"])
    pairs = branch_option_pairs(jt if paired is None else paired, baselines)
    out.matched = matched_time_to_failure(ff[_MATCHED_COLS], pairs, ["contrast", "condition"])
    return out
