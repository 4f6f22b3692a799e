"""The fork-aware tables of a SQLite store from its judgment summaries (``branchpoint.core.judgment_summaries``:
one verdict byte per turn, per conversation x rating key x criterion), without reading the
judgment rows: what ``branchpoint.analysis.pairing.fork_codes`` counts from every row, counted per summary.
``fork_tables`` chooses: the summaries where the store keeps them, else every row's codes.

The rules are those of ``branchpoint.analysis.pairing.forks``: a turn an arm copied from its parent (before its fork)
is counted once, in the conversation that produced it (its root, ``coded_roots``); a copy whose
root has no rating of that turn under that key (the root was not judged, or is left out, or a
second judge rated part of the store) is kept in its place: the copy on the smallest
conversation id when several are (``branchpoint.analysis.pairing.forks.distinct_ratings``' rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.analysis.pairing.fork_codes import (
    ForkTables,
    code_fork_tables,
    count_frame,
    pairing_frame,
    version_labels,
)
from branchpoint.analysis.pairing.forks import COUNT_COLS, TurnCounts
from branchpoint.analysis.tables.judgments import (
    CONVERSATION_COLUMNS,
    choice_columns,
    conversation_table,
)
from branchpoint.core import read
from branchpoint.core.judgment_summaries import EMPTY, JudgmentSummaries, read_summaries
from branchpoint.core.read.fast import SCORE_OF_CODE

FAIL, PARTIAL, PASS, OTHER, ERROR = (ord(c) for c in "fqpoe")
SCORED = (FAIL, PARTIAL, PASS)


def _sums(per_code: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
    """The count columns of ``branchpoint.analysis.pairing.fork_codes.FORK_COUNT_COLUMNS`` from counts per verdict code."""
    f, q, p, o, e = (per_code[c].astype(np.int64) for c in (FAIL, PARTIAL, PASS, OTHER, ERROR))
    score = sum(per_code[c].astype(np.float64) * SCORE_OF_CODE[c] for c in SCORED)
    return {
        "n_rated": (f + q + p + o).astype(np.float64),
        "n_fail": f.astype(np.float64),
        "n_partial": q.astype(np.float64),
        "n_error": e.astype(np.float64),
        "n_other": o.astype(np.float64),
        "score_sum": np.asarray(score, dtype=np.float64),
        "n_scored": (f + q + p).astype(np.float64),
    }


class SummaryTurnCounts(TurnCounts):
    """``TurnCounts`` of summary rows: the counts of a row from a turn index on, from cumulative
    counts per turn column (the whole conversation's rating, the last column, always counts)."""

    def __init__(self, cells: np.ndarray) -> None:
        width = cells.shape[1] - 1
        self.width = width
        self.span = float(width + 1)
        # Only the turn columns that hold a rating somewhere (the persona's turns are never
        # judged: half the columns, and half the time, at the seed study's scale); ``before[t]``:
        # how many of them come before turn t.
        used = np.flatnonzero((cells[:, :width] != EMPTY).any(axis=0))
        self.before = np.searchsorted(used, np.arange(width + 1))
        kind = np.uint8 if width < 255 else np.int32
        # ``cum[c][j, g]``: how many of row g's first j used columns hold code c. A row of it
        # per column, added column by column: a cumsum along each short row (20 columns of
        # 850,000 rows) ran one inner loop per row, 0.5 s.
        self.cum: dict[Any, np.ndarray] = {}
        self.whole: dict[int, np.ndarray] = {}
        columns = np.ascontiguousarray(cells[:, used].T)
        for c in (FAIL, PARTIAL, PASS, OTHER, ERROR):
            cum = np.zeros((len(used) + 1, len(cells)), kind)
            for j, column in enumerate(columns):
                np.add(cum[j], column == c, out=cum[j + 1], casting="unsafe")
            self.cum[c] = cum
            self.whole[c] = cells[:, width] == c

    def codes_from(self, rows: np.ndarray, cutoff: np.ndarray) -> dict[int, np.ndarray]:
        """Per row of ``rows``: how many of its cells hold each verdict code from turn
        ``cutoff`` on, the whole conversation's rating included (inf: none; NaN: every turn)."""
        rows = np.asarray(rows, dtype=np.int64)
        cutoff = np.asarray(cutoff, dtype=float)
        never = np.isinf(cutoff)
        cut = np.where(never | np.isnan(cutoff), 0.0, cutoff)
        at = self.before[np.ceil(np.clip(cut, 0, self.width)).astype(np.int64)]
        per: dict[int, np.ndarray] = {}
        for c, cum in self.cum.items():
            got = cum[-1, rows].astype(np.int64) - cum[at, rows] + self.whole[c][rows]
            per[c] = np.where(never, 0, got)
        return per

    def after(self, rows: np.ndarray, cutoff: np.ndarray) -> dict[str, np.ndarray]:
        cutoff = np.asarray(cutoff, dtype=float)
        unknown = np.isnan(cutoff)  # no cut-off (a set without its baseline arm): no count
        per = self.codes_from(rows, cutoff)
        per[ERROR] = np.zeros(len(cutoff), np.int64)  # contrasts count no errors
        sums = _sums(per)
        return {c: np.where(unknown, np.nan, sums[c]) for c in COUNT_COLS}


def distinct_counts(
    s: JudgmentSummaries,
    cells: np.ndarray,
    gconv: np.ndarray,
    gkey: np.ndarray,
    gcrit: np.ndarray,
    anc: np.ndarray,
    shared: np.ndarray,
    turns: SummaryTurnCounts,
) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """Counts per verdict code of each group's ratings with every copied turn once
    (``branchpoint.analysis.pairing.forks.distinct_ratings``), and whether the group keeps any rating."""
    from branchpoint.analysis.pairing.forks import coded_roots

    width = cells.shape[1] - 1
    n = len(cells)
    s1 = shared[1][gconv] if len(shared) > 1 else np.full(n, -np.inf)
    col = np.arange(width + 1)
    # A turn at or after the fork with the parent is the arm's own; the whole conversation's
    # rating is its own unless it never forked (s1 inf; -inf: no parent, every turn its own).
    own = col[None, :] >= s1[:, None]
    own[:, width] = ~np.isinf(s1) | (s1 < 0)
    present = cells != EMPTY
    counts = turns.codes_from(np.arange(n), np.where(s1 < 0, 0.0, s1))
    copied_cells = present & ~own
    kept = present.sum(axis=1) > copied_cells.sum(axis=1)  # a present cell of its own
    g, t = np.nonzero(copied_cells)
    if len(g):
        n_key, n_crit = len(s.keys), len(s.criterion_ids)
        n_conv = len(s.conversation_ids)
        # A cell's root depends on its conversation and turn only: found once for each of
        # those (a grid of conversations x turns), not for each copied cell of each criterion.
        grid_conv = np.repeat(np.arange(n_conv), width + 1)
        grid_turn = np.tile(np.append(np.arange(width, dtype=float), np.nan), n_conv)
        grid = coded_roots(grid_conv, grid_turn, anc, shared).reshape(n_conv, width + 1)
        root = grid[gconv[g], t]
        lookup = np.full(n_conv * n_key * n_crit, -1, np.int64)
        lookup[(gconv * n_key + gkey) * n_crit + gcrit] = np.arange(n)
        in_ids = root < n_conv
        at = np.where(in_ids, (np.where(in_ids, root, 0) * n_key + gkey[g]) * n_crit + gcrit[g], 0)
        rg = np.where(in_ids, lookup[at], -1)
        taken = (rg >= 0) & (cells[np.maximum(rg, 0), t] != EMPTY)
        orphan = ~taken
        if orphan.any():
            og, ot = g[orphan], t[orphan]
            okey = ((root[orphan] * n_key + gkey[og]) * n_crit + gcrit[og]) * (width + 1) + ot
            # Several copies of one turn stand in for its root: the smallest conversation id.
            rank = np.argsort(np.argsort(np.array(s.conversation_ids, dtype=object)))[gconv[og]]
            order = np.lexsort((rank, okey))
            _, first = np.unique(okey[order], return_index=True)
            og, ot = og[order[first]], ot[order[first]]
            codes = cells[og, ot]
            for c in counts:
                counts[c] = counts[c] + np.bincount(og, weights=codes == c, minlength=n).astype(
                    np.int64
                )
            kept[og] = True
    return counts, kept


def fork_tables(
    store_or_db: Any,
    runs: Sequence[str] | None,
    leave_out: set[str] | None = None,
    *,
    summaries: bool = True,
) -> ForkTables | None:
    """The fork-aware tables of a SQLite store (None on another database, or with no judgment:
    use the judgment table). ``leave_out``: conversations to leave out (retried).

    Counted from the judgment summaries (a row per conversation x rating key x criterion) where
    the store keeps them and they decide every count, else (a store not yet migrated, or
    ``summaries=False``) from every judgment row's codes (``branchpoint.analysis.pairing.fork_codes``); both give
    the same tables (tests compare them with the judgment table's)."""
    path = read.sqlite_path(store_or_db)
    if path is None:
        return None
    if summaries:
        got = read_summaries(path)
        if got is not None:
            return summary_fork_tables(got, path, store_or_db, runs, leave_out)
    return code_fork_tables(store_or_db, runs, leave_out)


def summary_fork_tables(
    s: JudgmentSummaries,
    path: str,
    store_or_db: Any,
    runs: Any,
    leave_out: set[str] | None,
) -> Any:
    """``fork_tables`` from the summaries ``s``; None when nothing is judged."""
    from branchpoint.analysis.pairing.forks import PostForkCounts, Tree, coded_copies, coded_tree
    from branchpoint.core.read.fast import risk_areas

    conv = conversation_table(store_or_db, runs)
    if leave_out:
        conv = conv[~conv["conversation_id"].isin(leave_out)]
    ids = np.array(s.conversation_ids, dtype=object)
    allowed = set(conv["conversation_id"].astype(str))
    wanted = np.fromiter((i in allowed for i in ids), dtype=bool, count=len(ids))
    grows = np.flatnonzero(wanted[s.conversation]) if len(s) else np.zeros(0, np.int64)
    if not len(grows):
        return None
    conv = conv[_among(conv["conversation_id"], set(ids[wanted]))]
    front = [c for c in CONVERSATION_COLUMNS if c in conv.columns]
    conv = conv[front + sorted(choice_columns(conv), key=list(conv.columns).index)]
    per_key = np.bincount(s.key[grows], weights=s.n[grows], minlength=len(s.keys))
    labels, notes = version_labels(s, per_key.astype(np.int64))
    tree_rows = read.conversation_tree(store_or_db, runs)
    judged = set(ids[pd.unique(s.conversation[grows])])  # hashed: np.unique sorts every row
    tree_rows = tree_rows[_among(tree_rows["conversation_id"], judged)]
    tree = Tree(tree_rows)
    _, anc, shared = coded_tree(tree, list(ids))
    cells = s.cells[grows]
    gconv = s.conversation[grows].astype(np.int64)
    gkey = s.key[grows].astype(np.int64)
    gcrit = s.criterion[grows].astype(np.int64)
    n_crit = max(len(s.criterion_ids), 1)
    both = pd.unique(s.key.astype(np.int64) * n_crit + s.criterion)
    pairs = sorted({(s.keys[b // n_crit][0], s.criterion_ids[b % n_crit]) for b in both})
    codes = _Codes(s, risk_areas(path, pairs))

    turns = SummaryTurnCounts(cells)
    every = _sums(turns.codes_from(np.arange(len(cells)), np.zeros(len(cells))))
    made: list[tuple[np.ndarray | None, pd.DataFrame]] = []

    def rows(sums: dict[str, np.ndarray], keep: np.ndarray | None) -> pd.DataFrame:
        at = None if keep is None else np.flatnonzero(keep)

        # Frames of the same rows share their text columns (copy-on-write): at the seed study's
        # scale each is 400 MB, and the distinct-turn and conversation-level frames usually
        # hold the same rows (those of every arm but the copies).
        def same(k: np.ndarray | None) -> bool:
            if k is None or keep is None:
                return k is None and keep is None
            return bool(np.array_equal(k, keep))

        like = next((f for k, f in made if same(k)), None)
        sel: Any = slice(None) if at is None else at
        picked = {c: v[sel] for c, v in sums.items()}
        if like is None:  # the groups ``keep`` selects, made from their codes
            out = count_frame(codes, gconv[sel], gkey[sel], gcrit[sel], picked, labels, conv)
            made.append((keep, out))
            return out
        out = like.copy(deep=False)
        for c, v in picked.items():
            out[c] = v.astype(out[c].dtype)
        return out

    if tree.has_forks:
        per, kept = distinct_counts(s, cells, gconv, gkey, gcrit, anc, shared, turns)
        cc = rows(_sums(per), kept)
    else:
        cc = rows(every, None)
    copied = coded_copies(shared)[: len(ids)][gconv]
    cc_conv = rows(every, ~copied if copied.any() else None)
    # Every group again, coded for pairing, with each conversation's parent and fork turn.
    cc_all = pairing_frame(codes, gconv, gkey, gcrit, every, labels, conv, tree_rows=tree_rows)
    out = ForkTables(cc, cc_conv, PostForkCounts(cc_all, turns), notes)
    out.n_judgments = int(s.n[grows].sum())
    return out


def _among(ids: pd.Series, names: set[str]) -> np.ndarray:
    """Which of ``ids`` are in ``names`` (``Series.isin`` of an arrow string column converts
    the set element by element: 0.3 s for 35,000 ids; so did iterating the column itself)."""
    return np.fromiter((str(i) in names for i in ids.tolist()), dtype=bool, count=len(ids))


class _Codes:
    """What ``count_frame`` reads of ``branchpoint.core.read.fast.JudgmentCodes``, from summaries."""

    def __init__(self, s: JudgmentSummaries, risk_area: dict[tuple[str, str], Any]) -> None:
        self.keys = s.keys
        self.criterion_ids = s.criterion_ids
        self.conversation_ids = s.conversation_ids
        self.risk_area = risk_area
