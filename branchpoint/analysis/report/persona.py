"""The report's section on the persona (issue 36): manipulation checks and realism, per simulator.

Self-contained: it reads the store itself and hands the report ``Section`` objects, so that the
report calls it once. What it shows:

- whether the realism gate (``realism_min``) was on in each run;
- the manipulation checks per branch point x option x simulator: arms fired, enacted, fired but
  not enacted, unchecked, and the enactment rate (enacted over checked);
- the automatic realism ratings per simulator and rater (share very or mostly realistic, with a
  Wilson interval, and the count at each level), and the persona turns rated low;
- agreement of the automatic realism rater with people's realism ratings (quadratic weighted
  kappa, ordinal alpha), per persona turn and per conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from branchpoint.analysis.pairing.realisation import realisation_table
from branchpoint.analysis.raters.persona_raters import enactment_by_rater, rater_kind
from branchpoint.analysis.raters.realism import (
    automatic_realism,
    automatic_realism_by_simulator,
    realism_agreement,
    realism_ratings,
)
from branchpoint.analysis.report.sections import Section
from branchpoint.core.human_labels import REALISM_LEVELS

INTRO = (
    "A manipulation check asks whether the persona did what its arm told it to: the persona turn "
    "on which a branch point fired is rated enacted, partly or not enacted "
    "(`branchpoint judge --persona-judge`). Per-protocol contrasts keep only pairs whose two arms "
    "fired and were not rated not enacted (partly counts as enacted; an unchecked turn counts as "
    "enacted, as before checks existed; a check that is an error never does); 'fired but not "
    "enacted' is counted apart. Realism: every "
    "persona turn rated very / mostly / mixed / not realistic for the scenario's persona. Every "
    "realism and enactment figure names its rater and the rater's kind: the offline rules "
    "(heuristic) catch assistant-speak, word salad, keyboard mash and copied prompts or replies, "
    "and give no verdict on a language they have no rules for; they cannot judge whether a "
    "story is plausible, which a model rater (--persona-judge MODEL) can."
)


def _gate_notes(store_or_db: Any, runs: Sequence[str] | None) -> list[str]:
    """One line per run: whether the realism gate was on, and at which level."""
    import json

    from sqlalchemy import select

    from branchpoint.core.read.schema import RUNS
    from branchpoint.core.read.source import read_frame

    r = RUNS.c
    q = select(r.id, r.config).order_by(r.created_at)
    if runs is not None:
        q = q.where(r.id.in_(list(runs)))
    out = []
    for run_id, config in read_frame(q, store_or_db).itertuples(index=False):
        data = json.loads(config) if isinstance(config, str) else config  # JSON text on SQLite
        level = data.get("realism_min") if isinstance(data, dict) else None
        out.append(
            f"Run {run_id}: realism gate on (persona turns rated below {level!r} by the offline "
            "rater were regenerated; the rejected attempts are stored as model calls)."
            if level
            else f"Run {run_id}: realism gate off."
        )
    return out


def _enactment(t: pd.DataFrame) -> pd.DataFrame:
    """The manipulation checks of ``t`` (``realisation_table``), or empty when none is stored."""
    if t.empty or int(t[["n_enacted", "n_not_enacted", "n_check_error"]].to_numpy().sum()) == 0:
        return pd.DataFrame()
    return pd.DataFrame({
        "branch point": t["branch_point"], "option": t["option"], "simulator": t["simulator"],
        "arms": t["n_arms"], "fired": t["n_fired"], "enacted": t["n_enacted"],
        "fired, not enacted": t["n_not_enacted"], "unchecked": t["n_unchecked"],
        "check error": t["n_check_error"],
        "enactment rate": [f"{x:.0%}" if x == x else "" for x in t["enactment_rate"]],
    })  # fmt: skip


def _enactment_notes(t: pd.DataFrame, shown: pd.DataFrame) -> list[str]:
    """Why there is no manipulation-check table, or what its error column means."""
    if shown.empty:
        if t.empty or int(t["n_fired"].sum()) == 0:
            return [
                "No branch point fired on a persona turn in these runs: there was nothing for a "
                "manipulation check to rate (every contrast is not realised)."
            ]
        return ["No manipulation checks stored: run `branchpoint judge --persona-judge`."]
    errors = int(t["n_check_error"].sum())
    if not errors:
        return []
    return [
        f"{errors} manipulation check(s) are error (the rater could not answer): those arms are "
        "not shown to have enacted their option, so they are left out of the per-protocol "
        "contrasts and of the enactment rate; rate them again with `branchpoint judge "
        "--persona-judge` (errors are rated again, verdicts are kept)."
    ]


def persona_sections(store_or_db: Any, runs: Sequence[str] | None) -> list[Section]:
    """The report's persona section, or nothing when no persona turn was rated and no run gated."""
    gates = _gate_notes(store_or_db, runs)
    realised = realisation_table(store_or_db, runs, by=("simulator",))
    enactment = _enactment(realised)
    auto = automatic_realism(store_or_db, runs)
    if enactment.empty and auto.empty and not any("gate on" in g for g in gates):
        return []
    s = Section("Manipulation checks and persona realism", text=[INTRO, *gates])
    if not enactment.empty:
        s.tables.append(("Manipulation checks by branch point, option and simulator", enactment))
        by_rater = enactment_by_rater(store_or_db, runs)
        s.tables.append(
            ("Manipulation checks by rater (its kind, and agreement with people's enactment "
             "labels of the same turns where there are any)", by_rater.round(3))
        )  # fmt: skip
        raters = ", ".join(f"{r} ({rater_kind(r)})" for r in by_rater["rater"])
        s.text.append(
            f"The enactment figures above are the checks of: {raters}; where more than one "
            "rater checked a turn, a model rater's verdict counts before the heuristic's."
        )
    s.text.extend(_enactment_notes(realised, enactment))
    if not auto.empty:
        by_sim = automatic_realism_by_simulator(auto)
        by_sim.insert(2, "rater kind", [rater_kind(r) for r in by_sim["rater"]])
        s.tables.append(
            ("Automatic realism ratings of persona turns, by simulator", by_sim.round(3))
        )
        low = auto[auto["verdict"].isin(["mixed", "not"])]
        failed = int((~auto["verdict"].isin(REALISM_LEVELS)).sum())
        s.text.append(
            f"{len(low)} of {len(auto) - failed} automatic realism ratings of persona turns (every rater) were mixed or not "
            "realistic."
            + (
                f" {failed} realism rating(s) are error (the rater could not answer): counted "
                "in no level."
                if failed
                else ""
            )
        )
        human = realism_ratings(store_or_db, runs)
        agree = realism_agreement(automatic_realism(store_or_db, runs, with_copies=True), human)
        if agree.empty:
            s.text.append(
                "No human realism ratings of the same turns or conversations: agreement of the "
                "automatic rater with people is not shown (rate them with `R` in the TUI, or "
                "`branchpoint labels import`)."
            )
        else:
            s.tables.append(
                ("Automatic realism rater against people (quadratic kappa, ordinal alpha)",
                 agree.round(3))
            )  # fmt: skip
    return [s]
