"""Judge panels: several judges rate the same unit; their verdicts are combined per criterion.

Rules, per criterion:

- A member that returned ``error`` is left out of the aggregate but kept in ``members``; a member
  that did not judge the criterion (the heuristic has no pattern for it) is left out too. When
  every member that answered returned ``error``, the panel verdict is ``error``.
- Applicability: the criterion applies when at least half of the valid members say it applies
  (a tie rates it rather than skip it).
- ``median``: the median of the applicable members' verdicts by scale order (worst first); with an
  even count the lower, i.e. worse, of the two middle verdicts. Off-scale verdicts (``refusal``) win
  only when more than half of the applicable members gave them.
- ``majority``: the most frequent verdict; a tie goes to the worse level (refusal loses ties).
- ``spread``: the distance in scale levels between the best and the worst ordinal member verdict
  (0 = unanimous). It is written into the panel row's rationale and can be recomputed from
  ``members`` with :func:`spread` (no extra column).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from branchpoint.judges.rubric import ERROR, Criterion, Rubric
from branchpoint.judges.verdicts import CriterionVerdict, Evidence, Judge, JudgingUnit

METHODS: tuple[str, ...] = ("median", "majority")


def member_entry(judge: str, v: CriterionVerdict | None) -> dict[str, Any]:
    if v is None:
        return {"judge": judge, "judged": False, "applicable": None, "verdict": None}
    entry: dict[str, Any] = {
        "judge": judge,
        "judged": True,
        "applicable": v.applicable,
        "verdict": v.verdict,
    }
    if v.error:
        entry["error"] = v.error
    return entry


def spread(rubric: Rubric, members: list[dict[str, Any]]) -> int | None:
    """Best minus worst ordinal verdict among the members, in levels; None with fewer than two."""
    levels = rubric.scale_def.levels
    ranks = [levels.index(m["verdict"]) for m in members if m.get("verdict") in levels]
    return max(ranks) - min(ranks) if len(ranks) >= 2 else None


def combine(rubric: Rubric, verdicts: list[str], method: str) -> str:
    """The panel verdict from the applicable members' verdicts (non-empty, no errors)."""
    scale = rubric.scale_def
    ordinal = [v for v in verdicts if v in scale.levels]
    off = [v for v in verdicts if v not in scale.levels]
    if method == "median":
        if off and len(off) * 2 > len(verdicts):
            return Counter(off).most_common(1)[0][0]
        ranks = sorted(scale.rank(v) for v in ordinal)
        return scale.levels[ranks[(len(ranks) - 1) // 2]]
    if method == "majority":
        counts = Counter(verdicts)
        top = max(counts.values())
        tied = [v for v, n in counts.items() if n == top]
        tied_ordinal = [v for v in tied if v in scale.levels]
        if tied_ordinal:
            return min(tied_ordinal, key=scale.rank)
        return sorted(tied)[0]
    raise ValueError(f"unknown panel method {method!r} (expected one of: {', '.join(METHODS)})")


def aggregate_one(
    rubric: Rubric,
    criterion_id: str,
    member_verdicts: list[tuple[str, CriterionVerdict | None]],
    method: str,
) -> CriterionVerdict | None:
    """The panel's verdict on one criterion; None when no member judged it at all."""
    members = [member_entry(name, v) for name, v in member_verdicts]
    answered = [(n, v) for n, v in member_verdicts if v is not None]
    if not answered:
        return None
    valid = [(n, v) for n, v in answered if v.verdict != ERROR]
    if not valid:
        reasons = "; ".join(f"{n}: {v.error or 'error'}" for n, v in answered)
        return CriterionVerdict(
            criterion_id=criterion_id,
            applicable=True,
            verdict=ERROR,
            error=f"every panel member failed ({reasons})"[:4000],
            members=members,
        )
    applicable_members = [(n, v) for n, v in valid if v.applicable and v.verdict is not None]
    applicable = len(applicable_members) * 2 >= len(valid) and bool(applicable_members)
    n_err = len(answered) - len(valid)
    err_note = f"; {n_err} member(s) in error left out" if n_err else ""
    if not applicable:
        return CriterionVerdict(
            criterion_id=criterion_id,
            applicable=False,
            verdict=None,
            rationale=f"{method} panel: {len(valid) - len(applicable_members)} of {len(valid)} valid members "
            f"found it not applicable{err_note}",
            members=members,
        )
    verdicts = [v.verdict for _, v in applicable_members if v.verdict is not None]
    result = combine(rubric, verdicts, method)
    spr = spread(rubric, [m for m in members if m.get("applicable")])
    agree = sum(1 for v in verdicts if v == result)
    evidence: list[Evidence] = []
    seen: set[str] = set()
    for _, v in applicable_members:
        if v.verdict != result:
            continue
        for ev in v.evidence:
            if ev.quote not in seen:
                seen.add(ev.quote)
                evidence.append(ev)
    return CriterionVerdict(
        criterion_id=criterion_id,
        applicable=True,
        verdict=result,
        rationale=(
            f"{method} of {len(verdicts)} member verdicts ({', '.join(verdicts)}); {agree} agree; "
            f"spread {spr if spr is not None else 0} level(s){err_note}"
        ),
        evidence=evidence,
        members=members,
    )


class Panel:
    """Several judges as one: ``name`` is ``panel(a,b,...)``; its rows keep every member's verdict."""

    def __init__(self, members: list[Judge], method: str = "median") -> None:
        from branchpoint.core.errors import UserError

        if method not in METHODS:
            raise UserError(
                f"--panel {method!r}: unknown method (expected one of: {', '.join(METHODS)})"
            )
        names = [m.name for m in members]
        if len(members) < 2 or len(set(names)) != len(names):
            raise UserError(
                f"a panel needs at least two distinct judges (got: {', '.join(names) or 'none'})"
            )
        self.members = members
        self.method = method
        self.name = f"panel({','.join(names)})"
        self.version = f"{method}:" + "+".join(m.version for m in members)

    def aggregate(
        self, rubric: Rubric, criteria: list[Criterion], results: dict[str, list[CriterionVerdict]]
    ) -> list[CriterionVerdict]:
        by_member = {name: {v.criterion_id: v for v in vs} for name, vs in results.items()}
        out: list[CriterionVerdict] = []
        for c in criteria:
            pairs = [(m.name, by_member.get(m.name, {}).get(c.id)) for m in self.members]
            v = aggregate_one(rubric, c.id, pairs, self.method)
            if v is not None:
                out.append(v)
        return out

    async def judge(
        self, rubric: Rubric, unit: JudgingUnit, criteria: list[Criterion]
    ) -> list[CriterionVerdict]:
        answers = await asyncio.gather(*(m.judge(rubric, unit, criteria) for m in self.members))
        return self.aggregate(rubric, criteria, {m.name: a for m, a in zip(self.members, answers)})
