"""Persona realism by simulator: how people rated the turns each simulator wrote.

The ratings are human labels under the pseudo-rubric ``realism`` (``branchpoint.core.human_labels``), given
in the TUI blind to the simulator or imported from a spreadsheet. Simulators are compared the way
the teen study chose its simulator: the share rated very or mostly realistic, with a Wilson 95%
interval, and the count at each level.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from sqlalchemy import select

from branchpoint.analysis.raters.agreement import cohen_kappa_quadratic, krippendorff_alpha
from branchpoint.core.human_labels import REALISM_LEVELS, REALISM_RUBRIC, REALISM_TURN
from branchpoint.core.read.schema import CONVERSATIONS, HUMAN_LABELS, JUDGMENTS, TURNS
from branchpoint.core.read.source import StoreRef, read_frame

REALISTIC = ("very", "mostly")
Z95 = 1.959963984540054


def realism_ratings(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per realism rating: simulator, annotator, verdict (and its conversation and turn)."""
    h, c = HUMAN_LABELS.c, CONVERSATIONS.c
    q = (
        select(c.simulator, h.annotator, h.verdict, h.conversation_id, h.turn_index, h.blind)
        .join_from(HUMAN_LABELS, CONVERSATIONS, c.id == h.conversation_id)
        .where(h.rubric_id == REALISM_RUBRIC)
    )
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    return read_frame(q, ref)


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion (sensible at 0 and 1 and for small n)."""
    if n == 0:
        return (np.nan, np.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def realism_by_simulator(ratings: pd.DataFrame) -> pd.DataFrame:
    """Per simulator: ratings, annotators, share very/mostly realistic with its interval, and the
    count at each level. Empty when there are no realism ratings."""
    cols = ["simulator", "n_ratings", "n_annotators", "share_realistic", "ci_low", "ci_high"]
    rated = ratings[ratings["verdict"].isin(REALISM_LEVELS)] if not ratings.empty else ratings
    if rated.empty:
        return pd.DataFrame(columns=cols + [f"n_{level}" for level in REALISM_LEVELS])
    rows = []
    for simulator, grp in rated.groupby("simulator", sort=True):
        n = len(grp)
        good = int(grp["verdict"].isin(REALISTIC).sum())
        low, high = wilson(good, n)
        row = {
            "simulator": simulator or "(none)",
            "n_ratings": n,
            "n_annotators": grp["annotator"].nunique(),
            "share_realistic": good / n,
            "ci_low": low,
            "ci_high": high,
        }
        for level in REALISM_LEVELS:
            row[f"n_{level}"] = int((grp["verdict"] == level).sum())
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- automatic ratings
# Issue 36: the persona rater (``branchpoint judge --persona-judge``) rates every persona turn on
# the same levels, stored as judgments under the same pseudo-rubric; people's ratings from the TUI
# (or imported) are the check on it, as human labels are for the chatbot judge.

RANK = {level: i for i, level in enumerate(REALISM_LEVELS)}  # 0 = very realistic


def automatic_realism(
    ref: StoreRef, runs: Sequence[str] | None = None, *, with_copies: bool = False
) -> pd.DataFrame:
    """One row per automatic realism rating of a persona turn: simulator, rater (the judge),
    conversation, turn index, verdict (``error`` kept: it is no rating, and counted apart).

    A turn shared by sibling arms is rated once, on its original (one observation). People see
    the copy in each arm's transcript, and the TUI's realism queue samples copies too: with
    ``with_copies`` the rating is also given under each copy's conversation and index, so that a
    person's rating of a copy pairs with it (for agreement only, never for the distribution)."""
    j, c = JUDGMENTS.c, CONVERSATIONS.c
    cols = [c.simulator, j.judge.label("rater"), j.verdict, j.conversation_id, j.turn_index]
    q = (
        select(*cols, j.turn_id, j.created_at, j.id)
        .join_from(JUDGMENTS, CONVERSATIONS, c.id == j.conversation_id)
        .where(j.rubric_id == REALISM_RUBRIC, j.criterion_id == REALISM_TURN)
    )
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    # A rater that rated again after its rubric or rules changed left its older rating beside
    # the new one (a different id): the newest counts, once.
    rated = (
        read_frame(q, ref)
        .sort_values(["created_at", "id"], kind="stable")
        .drop_duplicates(["turn_id", "rater"], keep="last")
        .drop(columns=["created_at", "id"])
        .sort_index()
        .reset_index(drop=True)
    )
    if not with_copies or rated.empty:
        return rated.drop(columns=["turn_id"])
    t = TURNS.c
    copies_q = (
        select(t.conversation_id, t.index.label("turn_index"), t.origin_turn_id.label("turn_id"))
        .join_from(TURNS, CONVERSATIONS, c.id == t.conversation_id)
        .where(t.role == "user", t.origin_turn_id.is_not(None))
    )
    if runs is not None:
        copies_q = copies_q.where(c.run_id.in_(list(runs)))
    copies = read_frame(copies_q, ref)
    on_copies = rated.drop(columns=["conversation_id", "turn_index"]).merge(copies, on="turn_id")
    return pd.concat([rated, on_copies[rated.columns]], ignore_index=True).drop(columns=["turn_id"])


def automatic_realism_by_simulator(auto: pd.DataFrame) -> pd.DataFrame:
    """Per simulator x rater: persona turns rated, share very/mostly realistic (Wilson 95%), the
    count at each level and of errors. Empty without automatic ratings."""
    cols = ["simulator", "rater", "n_turns", "share_realistic", "ci_low", "ci_high", "n_error"]
    if auto.empty:
        return pd.DataFrame(columns=cols + [f"n_{level}" for level in REALISM_LEVELS])
    rows = []
    for (simulator, rater), grp in auto.groupby(["simulator", "rater"], sort=True):
        rated = grp[grp["verdict"].isin(REALISM_LEVELS)]
        good = int(rated["verdict"].isin(REALISTIC).sum())
        low, high = wilson(good, len(rated))
        row = {
            "simulator": simulator or "(none)", "rater": rater, "n_turns": len(rated),
            "share_realistic": good / len(rated) if len(rated) else np.nan,
            "ci_low": low, "ci_high": high, "n_error": int(len(grp) - len(rated)),
        }  # fmt: skip
        for level in REALISM_LEVELS:
            row[f"n_{level}"] = int((rated["verdict"] == level).sum())
        rows.append(row)
    return pd.DataFrame(rows)


def _conversation_level(auto: pd.DataFrame) -> pd.DataFrame:
    """The rater's turn ratings summarised per conversation: the median level (the worse of two
    middles), what a person rating the whole conversation is compared with."""
    out = []
    for (cid, rater), grp in auto.groupby(["conversation_id", "rater"], sort=True):
        ranks = sorted(RANK[v] for v in grp["verdict"])
        out.append((cid, rater, REALISM_LEVELS[ranks[len(ranks) // 2]]))
    return pd.DataFrame(out, columns=["conversation_id", "rater", "verdict"])


def realism_agreement(auto: pd.DataFrame, human: pd.DataFrame) -> pd.DataFrame:
    """Agreement of each automatic rater with each person on the persona turns (and whole
    conversations) both rated: items, conversations, raw agreement, quadratic weighted Cohen's
    kappa and ordinal Krippendorff's alpha over the realism levels, and how often the rater
    called a turn more (``rater_kinder``) or less realistic than the person.

    ``auto``: ``automatic_realism``; ``human``: ``realism_ratings``."""
    cols = ["rater", "annotator", "unit", "n_items", "n_conversations", "raw_agreement",
            "kappa_quadratic", "alpha_ordinal", "rater_kinder", "rater_harsher"]  # fmt: skip
    auto = auto[auto["verdict"].isin(REALISM_LEVELS)] if not auto.empty else auto
    human = human[human["verdict"].isin(REALISM_LEVELS)] if not human.empty else human
    if auto.empty or human.empty:
        return pd.DataFrame(columns=cols)
    per_turn = human[human["turn_index"].notna()]
    per_conv = human[human["turn_index"].isna()]
    units = [
        ("persona turn", per_turn, auto, ["conversation_id", "turn_index"]),
        ("conversation", per_conv, _conversation_level(auto), ["conversation_id"]),
    ]
    rows = []
    for unit, people, machine, key in units:
        if people.empty:
            continue
        people = people.assign(turn_index=people["turn_index"].astype(float)) if key[1:] else people
        machine = (
            machine.assign(turn_index=machine["turn_index"].astype(float)) if key[1:] else machine
        )
        for (rater, annotator), both in (
            machine.merge(people, on=key, suffixes=("_auto", "_human"))
            .groupby(["rater", "annotator"], sort=True)
        ):  # fmt: skip
            a = np.array([RANK[v] for v in both["verdict_auto"]], dtype=float)
            h = np.array([RANK[v] for v in both["verdict_human"]], dtype=float)
            domain = [float(i) for i in range(len(REALISM_LEVELS))]
            rows.append({
                "rater": rater, "annotator": annotator, "unit": unit, "n_items": len(both),
                "n_conversations": both["conversation_id"].nunique(),
                "raw_agreement": float(np.mean(a == h)),
                "kappa_quadratic": cohen_kappa_quadratic(a, h, labels=domain),
                "alpha_ordinal": krippendorff_alpha(np.vstack([a, h]), "ordinal", domain),
                "rater_kinder": float(np.mean(a < h)), "rater_harsher": float(np.mean(a > h)),
            })  # fmt: skip
    return pd.DataFrame(rows, columns=cols)
