"""Realised branches: whether a matched pair's two arms actually did what they were assigned.

A branch option is realised in an arm when its branch point fired and the option's instruction was
in force for at least one persona turn (``branchpoint.core.read.realisation``). A chatbot that never offers
help leaves the accept and decline arms as copies of one conversation: comparing them measures
nothing, and counting them as a difference of zero pulls every effect toward zero.

Realised now means enacted too (issue 36): an arm whose persona turn was rated ``not_enacted`` by
the manipulation check (``branchpoint.judges.persona_checks``: the persona was told to decline the help and
said "ok thanks, I'll call them") differs from its twin in nothing but the label, so it is left
out of the per-protocol pairs like an arm that never fired. ``partly`` counts as enacted; a turn
nobody rated (``enactment`` None) counts as enacted, as every arm did before manipulation checks,
and is counted as unchecked in the realisation table. A turn whose every check is ``error`` (a
rater that could not answer) is not shown to have enacted anything: it is left out of the
per-protocol pairs too, and counted apart (``n_check_error``), never as enacted. ``fired_only`` drops the checks, for the
comparison that shows what they change.

So each matched contrast is given twice, labelled:

* **per protocol** (the headline): only pairs whose two arms both realised their option;
* **intention to treat** (``*_itt`` columns): every assigned pair. A pair that never forked is
  one conversation in both arms, so it enters with a difference of exactly zero (its whole
  conversation on both sides); a pair that forked is compared after the fork, as per protocol.

With a share r of pairs realised and an effect d only where realised, the intention-to-treat
difference is about r x d. A contrast with no realised pair is *not realised*: no per-protocol
difference, never a zero effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.analysis.pairing.forks import COUNT_COLS
from branchpoint.analysis.tables.judgments import group_codes
from branchpoint.core.domain import ENACTED, NOT_ENACTED, PARTLY_ENACTED
from branchpoint.core.scales import ERROR

NOT_REALISED = "not realised"
# Manipulation-check verdicts that take an arm out of the per-protocol pairs: a check that failed
# (error) is no evidence of enactment, so it is never counted as enacted.
NOT_ENACTED_VERDICTS = (NOT_ENACTED, ERROR)
# The realisation table's manipulation-check columns (``realisation_summary``).
ENACTMENT_COLUMNS = [
    "n_fired",
    "n_enacted",
    "n_not_enacted",
    "n_unchecked",
    "n_check_error",
    "enacted",
    "enactment_rate",
]
# Columns of an intention-to-treat summary kept next to the per-protocol one, renamed *_itt.
ITT_COLUMNS = ["n_pairs", "n_scenarios", "diff", "ci_low", "ci_high", "p_scenario", "diff_conv"]


def enacted_flags(realisation: pd.DataFrame) -> pd.Series:
    """Per row: fired and not rated ``not_enacted`` nor only ``error`` (unrated counts as
    enacted)."""
    flags = realisation["realised"].astype(bool)
    if "enactment" in realisation.columns:
        flags = flags & ~realisation["enactment"].isin(NOT_ENACTED_VERDICTS)
    return flags


def fired_only(realisation: pd.DataFrame | None) -> pd.DataFrame | None:
    """The realisation rows without their manipulation checks: realised means fired, as before."""
    if realisation is None or "enactment" not in realisation.columns:
        return realisation
    return realisation.drop(columns=["enactment"])


def realisation_lookup(realisation: pd.DataFrame | None, branch_point: str) -> dict[str, bool]:
    """conversation id -> whether its option at ``branch_point`` was realised (fired and, where a
    manipulation check rated it, enacted)."""
    if realisation is None or realisation.empty:
        return {}
    rows = realisation[realisation["branch_point"] == branch_point]
    flags = enacted_flags(rows)
    if "recorded" in rows.columns:  # a run that records no firing: unknown, counted as realised
        flags = flags | ~rows["recorded"].astype(bool)
    return dict(zip(rows["conversation_id"].astype(str), flags))


def with_realisation(
    cand: pd.DataFrame, realisation: pd.DataFrame | None, branch_point: str
) -> pd.DataFrame:
    """``cand`` (``contrasts.candidate_pairs``) with ``realised_a`` / ``realised_b``.

    Without realisation data (a conversation-level table, or no persona turns stored) every arm
    counts as realised, which is what the analysis assumed before realisation was recorded.
    """
    lookup = realisation_lookup(realisation, branch_point)
    if not lookup:
        return cand.assign(realised_a=True, realised_b=True)

    def flags(ids: pd.Series) -> np.ndarray:  # looked up once per distinct conversation
        codes, names = pd.factorize(ids, use_na_sentinel=False)
        known = np.array([lookup.get(str(i), False) for i in names], dtype=bool)
        return known[codes] if len(known) else np.zeros(len(ids), dtype=bool)

    return cand.assign(
        realised_a=flags(cand["conversation_id_a"]), realised_b=flags(cand["conversation_id_b"])
    )


def per_protocol_pairs(cand: pd.DataFrame) -> pd.DataFrame:
    """Pairs rated after the fork whose arms both realised their option."""
    keep = (cand["status"] == "pair") & cand["realised_a"] & cand["realised_b"]
    return cand[keep.to_numpy()]


def intention_to_treat_pairs(cand: pd.DataFrame, counts: Any) -> pd.DataFrame:
    """Every assigned pair: forked pairs as they are, never-forked pairs as a zero difference.

    ``counts``: an ``Encoded`` frame (``array(col)`` per conversation x criterion row), whose
    whole-conversation counts a never-forked pair takes, the same on both sides: its arms are one
    conversation (a judge that rated the copies differently is noise, not an effect).
    """
    never = (cand["status"] == "never_forked").to_numpy()
    out = cand.copy(deep=False)  # copy-on-write: the columns set below are new, cand unchanged
    if never.any():
        ia = out["_ia"].to_numpy(np.int64)
        safe = np.where(ia >= 0, ia, 0)
        for c in COUNT_COLS:
            whole = np.asarray(counts.array(c), dtype=float)[safe]
            whole = np.where(ia >= 0, whole, 0.0)
            for side in ("a", "b"):
                col = out[f"{c}_{side}"].to_numpy(float)
                out[f"{c}_{side}"] = np.where(never, whole, col)
        rated = out["n_rated_a"].to_numpy(float) > 0
        out["status"] = np.where(never & rated, "pair", np.asarray(out["status"], dtype=object))
    return out[(out["status"] == "pair").to_numpy()]


def with_itt(per_protocol: pd.DataFrame, itt: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per-protocol rows with the intention-to-treat figures beside them (``*_itt``).

    Both are ``contrasts.summarise_pairs`` tables. A group that has assigned pairs but no realised
    pair gets a row of its own, ``realisation`` = "not realised": every per-protocol figure blank
    and ``n_pairs`` 0.
    """
    keys = list(keys)
    side = itt[[*keys, *[c for c in ITT_COLUMNS if c in itt.columns]]].rename(
        columns={c: f"{c}_itt" for c in ITT_COLUMNS}
    )
    if per_protocol.empty:
        # The columns a summary has, every figure blank: nothing was realised to measure.
        blank = itt.copy()
        for c in blank.columns:
            if c not in keys:
                blank[c] = np.nan
        per_protocol = blank.astype({c: object for c in blank.columns if c not in keys})
    out = per_protocol.merge(side, on=keys, how="outer")
    out["n_pairs"] = pd.to_numeric(out["n_pairs"], errors="coerce").fillna(0).astype(int)
    out["realisation"] = np.where(out["n_pairs"] > 0, "per protocol", NOT_REALISED)
    if "interval" in out.columns:
        out["interval"] = np.where(out["n_pairs"] > 0, out["interval"], NOT_REALISED)
    return out


def arm_counts(
    cand: pd.DataFrame, keys: Sequence[str] = ("contrast", "branch_point", "baseline", "option")
) -> pd.DataFrame:
    """Per contrast: arms assigned each side, and how many realised their option (n of N).

    Counted from integer codes (``group_codes``): three pandas group-bys with a de-duplication
    each took 20 ms a contrast, a tenth of ``analyze``'s contrasts on a 300-conversation sweep.
    The groups, their order and the counts are those of ``groupby(keys, sort=True,
    dropna=False, observed=True)`` (a test compares them)."""
    keys = list(keys)
    # a pair of copied arms is its originals' pair stored again: counted once (the original)
    own = cand[(cand["status"] != "copy").to_numpy()] if "status" in cand.columns else cand
    if own.empty:
        return _arm_counts_grouped(own, keys)
    ids = ["conversation_id_a", "conversation_id_b"]
    first = ~pd.Series(group_codes(own, ids, sort=False)).duplicated().to_numpy()
    pairs = own[first]
    group = group_codes(pairs, keys)
    n = int(group.max()) + 1
    real_a = pairs["realised_a"].astype(bool).to_numpy()
    real_b = pairs["realised_b"].astype(bool).to_numpy()
    cols: dict[str, np.ndarray] = {}
    for side, flag in (("baseline", real_a), ("option", real_b)):
        # an arm counts once per group however many pairs it is in
        arm = pd.factorize(pairs[ids[side == "option"]], use_na_sentinel=False)[0]
        once = ~pd.Series(group * (int(arm.max()) + 1) + arm).duplicated().to_numpy()
        cols[f"n_realised_{side}"] = np.bincount(group[once], weights=flag[once], minlength=n)
        cols[f"n_arms_{side}"] = np.bincount(group[once], minlength=n)
    cols["n_realised_pairs"] = np.bincount(group, weights=real_a & real_b, minlength=n)
    cols["n_assigned_pairs"] = np.bincount(group, minlength=n)
    at = np.unique(group, return_index=True)[1]  # each group's first row, groups in order
    out = pairs[keys].iloc[at].reset_index(drop=True)
    for col in keys:  # plain values (text: str), as a frame of them (and a group-by) infers
        if isinstance(out[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype(object).infer_objects()
        elif out[col].dtype == object:
            out[col] = out[col].infer_objects()
    for name in ("n_realised_baseline", "n_arms_baseline", "n_realised_option", "n_arms_option",
                 "n_realised_pairs", "n_assigned_pairs"):  # fmt: skip
        out[name] = cols[name].astype(int)
    return out


def _arm_counts_grouped(pairs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``arm_counts`` by pandas group-bys: its definition, kept for an empty frame (the columns
    and dtypes a group-by gives) and for the test that checks the coded counts against it."""
    pairs = pairs.drop_duplicates(["conversation_id_a", "conversation_id_b"])

    def per_group(frame: pd.DataFrame, flag: Any) -> pd.DataFrame:
        grouped = frame.assign(_flag=flag).groupby(keys, dropna=False, sort=True, observed=True)
        return grouped["_flag"].agg(["sum", "size"])

    a = per_group(pairs.drop_duplicates([*keys, "conversation_id_a"]), lambda f: f["realised_a"])
    b = per_group(pairs.drop_duplicates([*keys, "conversation_id_b"]), lambda f: f["realised_b"])
    both = per_group(pairs, lambda f: f["realised_a"].astype(bool) & f["realised_b"].astype(bool))
    out = pd.DataFrame(
        {
            "n_realised_baseline": a["sum"].astype(int),
            "n_arms_baseline": a["size"].astype(int),
            "n_realised_option": b["sum"].astype(int),
            "n_arms_option": b["size"].astype(int),
            "n_realised_pairs": both["sum"].astype(int),
            "n_assigned_pairs": both["size"].astype(int),
        }
    ).reset_index()
    for col in keys:  # plain values (text: str), as a frame of them infers
        if isinstance(out[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype(object).infer_objects()
    return out


def without_copied_arms(realisation: pd.DataFrame, tree: pd.DataFrame) -> pd.DataFrame:
    """``realisation`` less the rows of arms that never forked where they repeat their parent's
    row (same branch point, same option): that arm is its parent's conversation stored again,
    one arm. Its row for the branch point it was made for (an option its parent does not hold)
    stays: an assigned arm whose branch never fired. ``tree``: ``read.conversation_tree``."""
    from branchpoint.core.read.units import copied_conversations

    if realisation.empty or tree.empty:
        return realisation
    copies = copied_conversations(tree)
    if not copies:
        return realisation
    parent = dict(zip(tree["conversation_id"].astype(str), tree["parent_id"]))
    option = {
        (str(c), str(b)): o
        for c, b, o in realisation[["conversation_id", "branch_point", "option"]].itertuples(
            index=False
        )
    }
    cids = realisation["conversation_id"].astype(str).to_numpy()
    repeat = [
        cid in copies and option.get((str(parent.get(cid)), str(bp))) == opt
        for cid, bp, opt in zip(cids, realisation["branch_point"], realisation["option"])
    ]
    return realisation[~np.asarray(repeat, dtype=bool)]


def unrecorded_note(realisation: pd.DataFrame | None) -> str | None:
    """A sentence for conversations whose run records no branch firing at all, or None."""
    if realisation is None or realisation.empty or "recorded" not in realisation.columns:
        return None
    n = int(realisation.loc[~realisation["recorded"], "conversation_id"].nunique())
    if not n:
        return None
    return (
        f"{n} conversations come from runs whose persona turns record no branch firing at all "
        "(written without realisation data): their arms are counted as realised, as before "
        "realisation was recorded, and left out of the realised-arm counts."
    )


def realisation_summary(
    realisation: pd.DataFrame,
    conversations: pd.DataFrame,
    by: Sequence[str] = ("target",),
) -> pd.DataFrame:
    """Per branch point x option x ``by`` (target by default): arms realised, n of N.

    ``conversations``: one row per conversation with ``conversation_id`` and the ``by`` columns.
    ``first_exchange``: the median exchange at which the realised arms' option came into force.
    Manipulation checks (issue 36): ``n_fired`` (= ``n_realised``: the branch point fired),
    ``n_enacted`` (fired, rated enacted or partly), ``n_not_enacted`` (fired but not enacted: its
    own count), ``n_unchecked`` (fired, no rating), ``n_check_error`` (fired, every check an
    error: left out of the per-protocol pairs, not counted as checked), ``enacted`` ("n of m
    checked") and ``enactment_rate`` (enacted over checked).
    """
    cols = ["branch_point", "option", *by, "n_realised", "n_arms", "realised", "first_exchange",
            *ENACTMENT_COLUMNS]  # fmt: skip
    if realisation is None or realisation.empty:
        return pd.DataFrame(columns=cols)
    by = [c for c in by if c in conversations.columns]
    conv = conversations[["conversation_id", *by]].drop_duplicates("conversation_id")
    r = realisation.merge(conv, on="conversation_id", how="inner")
    if "recorded" in r.columns:  # runs that record no firing say nothing about realisation
        r = r[r["recorded"].astype(bool).to_numpy()]
    if r.empty:
        return pd.DataFrame(columns=cols)
    fired = r["realised"].astype(bool)
    check = r["enactment"] if "enactment" in r.columns else pd.Series(None, index=r.index)
    r = r.assign(
        _x=pd.to_numeric(r["exchange"], errors="coerce").astype(float),
        _enacted=fired & check.isin([ENACTED, PARTLY_ENACTED]),
        _not=fired & (check == NOT_ENACTED),
        _error=fired & (check == ERROR),
        _unchecked=fired & check.isna(),
    )
    g = r.groupby(["branch_point", "option", *by], sort=True, dropna=False)
    out = g.agg(
        n_realised=("realised", "sum"), n_arms=("realised", "size"), first_exchange=("_x", "median"),
        n_enacted=("_enacted", "sum"), n_not_enacted=("_not", "sum"), n_unchecked=("_unchecked", "sum"),
        n_check_error=("_error", "sum"),
    ).reset_index()  # fmt: skip
    for c in ("n_realised", "n_enacted", "n_not_enacted", "n_unchecked", "n_check_error"):
        out[c] = out[c].astype(int)
    out["realised"] = [f"{n} of {m}" for n, m in zip(out["n_realised"], out["n_arms"])]
    out["n_fired"] = out["n_realised"]
    checked = out["n_enacted"] + out["n_not_enacted"]
    out["enacted"] = [f"{n} of {m} checked" for n, m in zip(out["n_enacted"], checked)]
    out["enactment_rate"] = np.where(
        checked > 0, out["n_enacted"] / checked.where(checked > 0, 1), np.nan
    )
    return out[cols]


SUMMARY_BY = ("target", "condition", "simulator")


def realisation_table(
    store_or_db: Any, run: str | Sequence[str] | None = None, by: Sequence[str] = SUMMARY_BY
) -> pd.DataFrame:
    """Arms realised per branch point x option x target x condition x simulator (n of N), from
    the store: what ``analyze``, the report and ``export --level realisation`` show."""
    from branchpoint.analysis.tables.judgments import conversation_table, resolve_runs
    from branchpoint.core import read

    runs = resolve_runs(store_or_db, run)
    realisation = read.realisation_rows(store_or_db, runs)
    # an arm that never forked is its parent's conversation stored again: one arm, not two
    realisation = without_copied_arms(realisation, read.conversation_tree(store_or_db, runs))
    return realisation_summary(realisation, conversation_table(store_or_db, runs), by=by)
