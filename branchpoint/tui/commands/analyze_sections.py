"""``branchpoint analyze``'s time-to-first-failure and chatbot sections: the tables the report's
sections show (``branchpoint.analysis.survival.section``, ``branchpoint.analysis.chatbots.section``),
from the same result of the analysis (``Analysis.time_to_failure``, ``Analysis.chatbots``).
Shorter than the report: the per-arm curves and the plot are in the report and in JSON."""

from __future__ import annotations

from typing import Any

import pandas as pd

from branchpoint.analysis.chatbots.section import TITLE as CHATBOTS
from branchpoint.analysis.chatbots.section import chatbot_tables
from branchpoint.analysis.pipeline import Analysis
from branchpoint.analysis.preregistered.section import EXPLORATORY
from branchpoint.analysis.survival.section import (
    MATCHED,
    PER_ARM,
    PER_TARGET,
    time_to_failure_tables,
)
from branchpoint.analysis.survival.section import TITLE as SURVIVAL
from branchpoint.analysis.survival.summary import NO_TURNS
from branchpoint.tui.commands.json_rows import json_records

SHOWN = 8  # branch-option rows printed (every row: --format json, the report)
TTF_METHOD = (
    "exchanges until a conversation's first failing reply on any criterion; a conversation "
    "without one is censored at its end, for the reason it ended; Kaplan-Meier with 95% "
    "log(-log) intervals. Branch options: the restricted-mean difference per scenario, the "
    "scenario-level test named in 'test', Holm over the table (each judge's rows apart)."
)


def _title(title: str, exploratory: bool) -> str:
    return title + (EXPLORATORY if exploratory else "")


def text_sections(a: Analysis, *, exploratory: bool) -> list[str | tuple[str, pd.DataFrame]]:
    """Both sections as ``analyze`` prints them, in order: a line, or a table (caption, frame).
    ``exploratory``: a sweep registered an analysis plan, so every table outside its
    Confirmatory family is exploratory (as the report labels it)."""
    out: list[str | tuple[str, pd.DataFrame]] = []
    t = a.time_to_failure
    title = _title(SURVIVAL, exploratory)
    if t is None or t.why_empty:
        out.append(f"{title}: {t.why_empty if t is not None else NO_TURNS}")
    else:
        out.append(f"{title}: {TTF_METHOD}")
        for caption, frame in time_to_failure_tables(t):
            if caption == PER_ARM:
                continue  # in --format json and the report
            if caption == MATCHED and len(frame) > SHOWN:
                # the smallest p first, as the headline contrasts (row order of ``t.matched``)
                top = t.matched.sort_values(["p_scenario_holm", "p_scenario"], kind="stable")
                frame = frame.loc[top.index[:SHOWN]]
                caption += f"; {SHOWN} of {len(t.matched)} rows, smallest p first"
            out.append((f"{title}: {caption}", frame))
            if caption == PER_TARGET:
                out.append(t.counts_line())
        if not t.per_arm.empty or len(t.matched) > SHOWN:
            out.append(f"{title}: every row, per arm too, in --format json and the report")
    c = a.chatbots
    title = _title(CHATBOTS, exploratory)
    if c is None:
        return out
    if c.absent:
        return [*out, f"{title}: {c.absent}"]
    out += [(f"{title}: {caption}", frame) for caption, frame in chatbot_tables(c)]
    if len(c.targets) == 2:
        out.append(f"{title}: pair by pair, with what regressed: branchpoint compare "
                   f"--a {c.targets[0]} --b {c.targets[1]}")  # fmt: skip
    return out


def sections_json(a: Analysis, *, exploratory: bool) -> dict[str, Any]:
    """Both sections' rows for ``analyze --format json`` (every row; the text shows fewer)."""

    t, c = a.time_to_failure, a.chatbots
    ttf: dict[str, Any] = {"exploratory": exploratory}
    if t is None or t.why_empty:
        ttf["absent"] = t.why_empty if t is not None else NO_TURNS
    else:
        own = t.own
        ttf.update({
            "absent": None, "n_conversations": int(own["conversation_id"].nunique()),
            "n_copied_conversations": len(t.copies), "per_target": json_records(t.per_target),
            "per_arm": json_records(t.per_arm), "matched": json_records(t.matched),
        })  # fmt: skip
    bots: dict[str, Any] = {"exploratory": exploratory}
    if c is None:
        bots["absent"] = "no judged conversations"
    else:
        bots.update({
            "absent": c.absent or None, "targets": c.targets, "ranking": json_records(c.ranking),
            "ed_friedman": json_records(c.ed_friedman), "ed_pairwise": json_records(c.ed_pairwise),
        })  # fmt: skip
    return {"time_to_failure": ttf, "chatbots": bots}
