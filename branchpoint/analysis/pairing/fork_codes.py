"""The fork-aware tables (``ForkTables``) of a SQLite store, counted from the judgment rows' codes
(``branchpoint.core.read.fast``) without a judgment table: every copied rating once, whole arms' copies left
out, and the per-turn counts that contrasts cut at the fork. ``branchpoint.analysis.pairing.fork_summaries`` counts
the same from the judgment summaries and chooses between the two (``fork_tables``)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.analysis.tables import judgments as tables
from branchpoint.analysis.tables.judgments import (
    CONVERSATION_COLUMNS,
    choice_columns,
    conversation_table,
    finish_aggregate,
)
from branchpoint.core import read


class ForkTables:
    """What the analysis of a store with forks or several judge versions needs, counted from the
    judgment rows' codes (SQLite): ``cc`` (every copied rating once: the turn-level unit),
    ``cc_conversation`` (copies of whole arms left out: the conversation-level unit), ``paired``
    (every rating, per turn, for contrasts cut at the fork) and ``notes`` (versions analysed
    apart). Each equals what the judgment table gives
    (``aggregate(distinct_ratings(...))`` and so on; tests check both paths agree)."""

    def __init__(
        self,
        cc: pd.DataFrame,
        cc_conversation: pd.DataFrame,
        paired: Any,
        notes: list[str],
    ) -> None:
        self.cc, self.cc_conversation, self.paired = cc, cc_conversation, paired
        self.notes = notes
        self.n_judgments = 0  # judgment rows counted (copies included)


def version_labels(codes: Any, n: np.ndarray) -> tuple[list[str], list[str]]:
    """Judge label per key code (each version apart where a rubric x judge has several, as
    ``keep_versions_apart``) and the notes that say so; ``n``: judgment rows per key code."""
    from branchpoint.analysis.tables.versions import version_conflicts, version_label

    present = [(k, int(c)) for k, c in zip(codes.keys, n) if c]
    versions = pd.DataFrame(
        [(r, h, j, p, c) for (r, j, h, p), c in present],
        columns=["rubric_id", "rubric_hash", "judge", "prompt_version", "n"],
    )
    notes = version_conflicts(versions)
    per: dict[tuple[str, str], int] = {}
    for r, j, _h, _p in (k for k, _ in present):
        per[(r, j)] = per.get((r, j), 0) + 1
    labels = [
        version_label(j, h, p) if notes and per.get((r, j), 0) > 1 else j
        for r, j, h, p in codes.keys
    ]
    return labels, notes


def _groups(codes: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The conversation x rating key x criterion group of each judgment row of ``rows``
    (positions, in the order written), numbered in order of first appearance as ``aggregate``
    gives them; and each group's dense key."""
    n_key, n_crit = len(codes.keys), len(codes.criterion_ids)
    dense = (codes.conversation[rows].astype(np.int64) * n_key + codes.key[rows]) * n_crit
    dense += codes.criterion[rows]
    # A group's first row starts a run of equal keys (rows of a group are usually together).
    starts = (
        np.flatnonzero(np.concatenate([[True], dense[1:] != dense[:-1]])) if len(rows) else rows
    )
    first = np.full(len(codes.conversation_ids) * n_key * n_crit, len(rows), np.int64)
    np.minimum.at(first, dense[starts], starts)
    used = np.flatnonzero(first < len(rows))
    used = used[np.argsort(first[used], kind="stable")]
    rank = np.empty(len(first), np.int64)
    rank[used] = np.arange(len(used))
    group = rank[dense].astype(np.int32 if len(used) < 2**31 else np.int64)
    return group, used


def _grouped(
    codes: Any,
    groups: tuple[np.ndarray, np.ndarray],
    counts: dict[str, np.ndarray],
    keep: np.ndarray | None,
    judge_of_key: list[str],
    conv: pd.DataFrame,
    make: Any = None,
) -> pd.DataFrame:
    """Conversation x criterion x judge counts of the rows ``keep`` selects (None: all), from
    their groups (``_groups``) and count columns, groups in order of first appearance, as
    ``make`` builds a frame of them (``count_frame``'s arguments; default ``count_frame``)."""
    group, used = groups
    n_key, n_crit = len(codes.keys), len(codes.criterion_ids)
    n_groups = len(used)

    def total(col: str) -> np.ndarray:
        w = counts[col].astype(np.float64)
        if keep is not None:
            w = np.where(keep, w, 0.0)
        return np.bincount(group, weights=w, minlength=n_groups)

    sums = {c: total(c) for c in FORK_COUNT_COLUMNS}
    present: Any = slice(None)
    if keep is not None:
        n_rows = np.bincount(group[keep], minlength=n_groups)
        # A group's first kept row may come later than its first row: order by the former.
        first_kept = np.full(n_groups, len(group), np.int64)
        at = np.flatnonzero(keep)
        np.minimum.at(first_kept, group[at], at)
        present = np.flatnonzero(n_rows > 0)
        present = present[np.argsort(first_kept[present], kind="stable")]
        sums = {c: v[present] for c, v in sums.items()}
    used = used[present]
    g_crit = used % n_crit
    g_key = (used // n_crit) % n_key
    g_conv = used // (n_crit * n_key)
    return (make or count_frame)(codes, g_conv, g_key, g_crit, sums, judge_of_key, conv)


def count_frame(
    codes: Any,
    g_conv: np.ndarray,
    g_key: np.ndarray,
    g_crit: np.ndarray,
    sums: dict[str, np.ndarray],
    judge_of_key: list[str],
    conv: pd.DataFrame,
    *,
    categorical: bool = False,
) -> pd.DataFrame:
    """The conversation x criterion x judge frame of groups given as codes (their conversation,
    rating key and criterion in ``codes``' lists) and their count columns ``sums``: each text
    column is its short list (as a frame column infers it) taken per row, and the
    conversation's columns are a left merge on its id made of takes (a string per row and a
    merge cost 1.3 s at the seed study's scale).

    ``categorical``: every text column a categorical instead (categories in text order, so that
    rows sort and group as the text does): what contrasts pair on (``pairing_frame``). At the
    seed study's scale the text frame is 400 MB and every filter of it copies strings."""

    def column(values: Any, at: np.ndarray) -> Any:
        if categorical:
            return coded(values, at)
        return pd.Series(np.asarray(values, dtype=object)).array.take(at)

    rubrics = [key[0] for key in codes.keys]
    n_crit = len(codes.criterion_ids)
    out: dict[str, Any] = {
        "conversation_id": column(codes.conversation_ids, g_conv),
        "rubric_id": column(rubrics, g_key),
        "criterion_id": column(codes.criterion_ids, g_crit),
        "risk_area": column(_risk_areas(codes).reshape(-1), g_key * n_crit + g_crit),
        "judge": column(judge_of_key, g_key),
        **{c: np.array(v) for c, v in sums.items()},  # copies: the frame owns its columns
    }
    row_of = _conversation_rows(codes, conv)[g_conv]
    for col in conv.columns.drop("conversation_id"):
        if categorical and not pd.api.types.is_numeric_dtype(conv[col].dtype):
            out[col] = coded(conv[col].to_numpy(), row_of)
        else:
            out[col] = conv[col].array.take(row_of, allow_fill=True)
    frame = pd.DataFrame(out, copy=False)  # every column made here
    if categorical:  # finish_aggregate's counts, its text left categorical
        for col in ("n_rated", "n_fail", "n_partial", "n_error", "n_other", "n_scored"):
            frame[col] = frame[col].astype(np.int64)
        frame["score_sum"] = frame["score_sum"].astype(float)
        return frame
    return finish_aggregate(frame)


def _conversation_rows(codes: Any, conv: pd.DataFrame) -> np.ndarray:
    """The row of ``conv`` of each conversation code (-1: none; its ids are unique)."""
    ids = np.array([str(i) for i in codes.conversation_ids], dtype=object)
    return np.asarray(pd.Index(conv["conversation_id"].astype(str)).get_indexer(ids))


def _risk_areas(codes: Any) -> np.ndarray:
    """The risk area of each (rating key, criterion) code pair, looked up once per pair."""
    rubrics = [key[0] for key in codes.keys]
    areas = np.full((len(rubrics), len(codes.criterion_ids)), np.nan, dtype=object)
    for k, r in enumerate(rubrics):
        for c, x in enumerate(codes.criterion_ids):
            a = codes.risk_area.get((r, x))
            if a is not None:
                areas[k, c] = a
    return areas


def coded(values: Any, at: np.ndarray) -> pd.Categorical:
    """``values[at]`` as a categorical (categories in text order; ``at`` -1: missing), made
    without a string per row."""
    inv, cats = pd.factorize(np.asarray(values, dtype=object), sort=True)
    return pd.Categorical.from_codes(np.append(inv, -1)[at], categories=cats)


def pairing_frame(
    codes: Any,
    g_conv: np.ndarray,
    g_key: np.ndarray,
    g_crit: np.ndarray,
    sums: dict[str, np.ndarray],
    judge_of_key: list[str],
    conv: pd.DataFrame,
    *,
    tree_rows: pd.DataFrame,
) -> pd.DataFrame:
    """``count_frame(categorical=True)`` with each conversation's ``parent_id`` and ``fork_turn`` (a left
    merge with the tree, which holds a row per judged conversation): ``PostForkCounts``' rows."""
    frame = count_frame(codes, g_conv, g_key, g_crit, sums, judge_of_key, conv, categorical=True)
    ids = np.array([str(i) for i in codes.conversation_ids], dtype=object)
    at = pd.Index(tree_rows["conversation_id"].astype(str)).get_indexer(ids)[g_conv]
    for col in tree_rows.columns.drop("conversation_id"):
        values = tree_rows[col].to_numpy()
        if pd.api.types.is_numeric_dtype(tree_rows[col].dtype):
            frame[col] = np.append(values.astype(float), np.nan)[at]
        else:
            frame[col] = coded(values, at)
    return frame


FORK_COUNT_COLUMNS = (
    "n_rated", "n_fail", "n_partial", "n_error", "n_other", "score_sum", "n_scored",
)  # fmt: skip


def code_fork_tables(
    store_or_db: Any, runs: Sequence[str] | None, leave_out: set[str] | None = None
) -> ForkTables | None:
    """The fork-aware tables of a SQLite store counted from every judgment row's codes (None on
    another database, or with no judgment: use the judgment table). ``leave_out``:
    conversations to leave out (retried). ``branchpoint.analysis.pairing.fork_summaries.fork_tables`` counts the
    same from the judgment summaries where the store keeps them."""
    from branchpoint.analysis.pairing.forks import (
        PostForkCounts,
        Tree,
        TurnCounts,
        coded_copies,
        coded_roots,
        coded_tree,
        first_of_each,
    )
    from branchpoint.core.read import verdict_masks

    path = read.sqlite_path(store_or_db)
    if path is None:
        return None
    codes = read.sqlite_judgment_codes(
        path, chunk_rows=tables.CHUNK_ROWS, versions=True, turns=True
    )
    conv = conversation_table(store_or_db, runs)
    if leave_out:
        conv = conv[~conv["conversation_id"].isin(leave_out)]
    ids = np.array([str(i) for i in codes.conversation_ids], dtype=object)
    allowed = set(conv["conversation_id"].astype(str))
    wanted = np.fromiter((i in allowed for i in ids), dtype=bool, count=len(ids))
    rows = np.flatnonzero(wanted[codes.conversation]) if len(codes) else np.zeros(0, np.int64)
    if not len(rows):
        return None  # nothing judged: the judgment table is empty and cheap
    conv = conv[conv["conversation_id"].astype(str).isin(set(ids[wanted]))]
    front = [c for c in CONVERSATION_COLUMNS if c in conv.columns]
    conv = conv[front + sorted(choice_columns(conv), key=list(conv.columns).index)]
    labels, notes = version_labels(codes, np.bincount(codes.key[rows], minlength=len(codes.keys)))
    # The tree of the conversations that carry judgments, as the judgment table's would be.
    tree_rows = read.conversation_tree(store_or_db, runs)
    judged = set(ids[np.unique(codes.conversation[rows])]) if len(rows) else set()
    tree_rows = tree_rows[tree_rows["conversation_id"].astype(str).isin(judged)]
    tree = Tree(tree_rows)
    _, anc, shared = coded_tree(tree, list(ids))
    assert codes.turn_index is not None  # asked for above
    turn = codes.turn_index[rows].astype(float)
    turn[turn < 0] = np.nan
    conv_code = codes.conversation[rows].astype(np.int64)
    root = coded_roots(conv_code, turn, anc, shared)
    # One rating per (root, rating key incl. version, criterion, turn): the unit of analysis.
    span = int(np.nanmax(turn)) + 2 if np.isfinite(turn).any() else 1
    n_key, n_crit = len(codes.keys), len(codes.criterion_ids)
    key = ((root * n_key + codes.key[rows]) * n_crit + codes.criterion[rows]) * span
    key += np.where(np.isnan(turn), span - 1, np.nan_to_num(turn)).astype(np.int64)
    rank = np.argsort(np.argsort(ids, kind="stable"), kind="stable")  # of the id, in id order
    keep = first_of_each(key, root == conv_code, rank[conv_code]) if tree.has_forks else None
    del key
    m = verdict_masks(codes.verdict[rows])
    # Masks stay one byte a row; sums convert them as they go.
    counts = {c: m[c[2:]] for c in FORK_COUNT_COLUMNS if c.startswith("n_")}
    counts["score_sum"] = np.where(m["scored"], np.nan_to_num(m["score"]), 0.0)
    del m

    groups = _groups(codes, rows)
    cc = _grouped(codes, groups, counts, keep, labels, conv)
    copied = coded_copies(shared)[: len(ids)][conv_code]
    cc_conv = _grouped(codes, groups, counts, ~copied if copied.any() else None, labels, conv)
    with_tree = functools.partial(pairing_frame, tree_rows=tree_rows)
    cc_all = _grouped(codes, groups, counts, None, labels, conv, with_tree)
    group = groups[0]
    del groups, keep, copied, root, conv_code, rows  # before the per-turn counts' peak
    turns = TurnCounts.from_rows(group, turn, counts)
    out = ForkTables(cc, cc_conv, PostForkCounts(cc_all, turns), notes)
    out.n_judgments = len(group)
    return out
