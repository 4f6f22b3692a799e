"""Post-fork counting: where two matched arms stop sharing their transcript, and the ratings after.

Arms that agree up to a branch point share the very same prefix (``fork: shared``): the turns
before the fork are one conversation copied into both arms, so they carry no information about
the branch and only dilute a contrast towards zero. The store records the tree: each arm names
the arm whose prefix it copies (``parent_id``) and the index of its first own turn
(``fork_turn``; None: it has not diverged from its parent yet).

Arm X shares turns ``[0, fork_turn(X))`` with its parent, so it shares ``[0, m)`` with an
ancestor L, m the smallest fork turn on the path from X up to L. Two arms A and B share
``[0, d)`` with ``d = max over common ancestors L of min(m_A(L), m_B(L))``: their divergence.
Arms with no common ancestor (``fork: independent``, or another tree) share nothing (d = 0);
arms that never diverged share everything (d = inf) and have no post-fork turn to compare.

``TurnCounts`` sums the ratings of one conversation x criterion row from a turn index on, for
many rows and cut-offs at once (cumulative sums over rows sorted by turn, one ``searchsorted``).
A rating of the whole conversation (no turn index) cannot be split and is always counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

# The unit of analysis is defined once, in the read layer; these names stay importable here.
from branchpoint.core.read.units import _WHOLE, Tree
from branchpoint.core.read.units import copied_conversations as copied_conversations
from branchpoint.core.read.units import distinct_ratings as distinct_ratings
from branchpoint.core.read.units import turn_roots as turn_roots
from branchpoint.core.scales import PASS_PARTIAL_FAIL

COUNT_COLS = ("n_rated", "n_fail", "n_partial", "score_sum", "n_scored")
ROW_KEYS = ["conversation_id", "rubric_id", "criterion_id", "judge"]
PPF = PASS_PARTIAL_FAIL.scores


def rated_rows(judgments: pd.DataFrame) -> np.ndarray:
    """The rows that are ratings: applicable, with a verdict that is not ``error``."""
    v = judgments["verdict"].astype(object)
    return (
        judgments["applicable"].astype(bool).to_numpy()
        & v.notna().to_numpy()
        & (v != "error").to_numpy()
    )


def turn_level_counts(judgments: pd.DataFrame) -> pd.DataFrame:
    """Conversation x rubric x criterion x judge x turn counts from a judgment table."""
    v = judgments["verdict"].astype(object)
    rated = rated_rows(judgments)
    score = v.map(PPF).to_numpy(dtype=float)
    scored = rated & ~np.isnan(score)
    work = judgments[ROW_KEYS].copy()
    for c in ROW_KEYS:
        work[c] = work[c].astype(str)
    work["turn_index"] = pd.to_numeric(judgments["turn_index"], errors="coerce").to_numpy()
    work["n_rated"] = rated.astype(np.int64)
    work["n_fail"] = (rated & (v == "fail").to_numpy()).astype(np.int64)
    work["n_partial"] = (rated & (v == "partial").to_numpy()).astype(np.int64)
    work["score_sum"] = np.where(scored, score, 0.0)
    work["n_scored"] = scored.astype(np.int64)
    return work.groupby([*ROW_KEYS, "turn_index"], dropna=False, sort=False).sum().reset_index()


class TurnCounts:
    """Counts of the rows of a conversation x criterion frame ``cc`` from a turn index on."""

    def __init__(self, cc: pd.DataFrame, judgments: pd.DataFrame) -> None:
        tc = turn_level_counts(judgments)
        index = pd.MultiIndex.from_frame(cc[ROW_KEYS].astype(str))
        row = index.get_indexer(pd.MultiIndex.from_frame(tc[ROW_KEYS]))
        keep = row >= 0
        tc, row = tc[keep], row[keep]
        self._build(
            row, tc["turn_index"].to_numpy(float), {c: tc[c].to_numpy(float) for c in COUNT_COLS}
        )

    @classmethod
    def from_rows(
        cls, row: np.ndarray, turn_index: np.ndarray, counts: dict[str, np.ndarray]
    ) -> TurnCounts:
        """From one entry per rating: its ``cc`` row, turn index (NaN: the whole conversation)
        and counts (the fast path: no judgment table)."""
        out = cls.__new__(cls)
        out._build(row, turn_index, counts)
        return out

    def _build(self, row: np.ndarray, tix: np.ndarray, counts: dict[str, np.ndarray]) -> None:
        self.span = float(np.nanmax(tix)) + 2 if np.isfinite(tix).any() else 2.0
        # A whole-conversation rating sorts after every turn: it is counted at any cut-off.
        composite = row.astype(float)  # row * span + position, in place (millions of rows)
        composite *= self.span
        composite += np.where(np.isnan(tix), self.span - 1, tix)
        if len(composite) and bool((composite[1:] >= composite[:-1]).all()):
            order: np.ndarray | slice = slice(None)  # already in order (rows written in turn order)
        else:
            order = np.argsort(composite, kind="mergesort")
        self.composite = composite[order]
        del composite
        self.cum = {}
        for c in COUNT_COLS:
            v = np.asarray(counts[c])[order]
            # Masks (the fast path) add up exactly in integers, a quarter of float64's memory.
            kind = (
                v.dtype
                if v.dtype.kind == "f"
                else np.dtype(np.int32 if len(v) < 2**31 else np.int64)
            )
            self.cum[c] = np.concatenate([np.zeros(1, kind), np.cumsum(v, dtype=kind)])

    def after(self, rows: np.ndarray, cutoff: np.ndarray) -> dict[str, np.ndarray]:
        """Sums over turns with index >= ``cutoff`` for each cc row (cut-off inf: nothing)."""
        rows = np.asarray(rows, dtype=float)
        cut = np.clip(np.asarray(cutoff, dtype=float), 0.0, self.span - 1.5)
        start = np.searchsorted(self.composite, rows * self.span + cut, side="left")
        end = np.searchsorted(self.composite, rows * self.span + self.span - 0.5, side="left")
        never = np.isinf(np.asarray(cutoff, dtype=float))
        out = {}
        for c, cum in self.cum.items():
            out[c] = np.where(never, 0.0, (cum[end] - cum[start]).astype(float))
        return out

    def rows_of(self, positions: np.ndarray) -> TurnCounts:
        """The same counts for a subset of the frame's rows (``positions``, in their new order)."""
        return _TurnCountsView(self, np.asarray(positions, dtype=np.int64))


class _TurnCountsView(TurnCounts):
    def __init__(self, base: TurnCounts, positions: np.ndarray) -> None:
        self.base, self.positions = base, positions
        self.span = base.span

    def after(self, rows: np.ndarray, cutoff: np.ndarray) -> dict[str, np.ndarray]:
        return self.base.after(self.positions[np.asarray(rows, dtype=np.int64)], cutoff)

    def rows_of(self, positions: np.ndarray) -> TurnCounts:
        return _TurnCountsView(self.base, self.positions[np.asarray(positions, dtype=np.int64)])


class PostForkCounts:
    """What matched contrasts need from a judgment table, without the table: the conversation x
    criterion counts of every judgment (copies included, with ``parent_id`` / ``fork_turn``) and
    their per-turn counts, so that a shared prefix can be cut. Built on SQLite stores by
    ``branchpoint.analysis.pairing.fork_summaries.fork_tables``; contrasts take it wherever they take a judgment table, and
    it can be filtered like one (``counts[counts["simulator"] == s]``)."""

    def __init__(self, cc: pd.DataFrame, turns: TurnCounts) -> None:
        self.cc = cc.reset_index(drop=True)
        self.turns = turns
        # What the contrasts derive from these counts once (``branchpoint.analysis.contrasts.matched``' pairing):
        # the counts are not changed after they are built.
        self.memo: dict[str, Any] = {}

    @property
    def columns(self) -> pd.Index:
        return self.cc.columns

    @property
    def empty(self) -> bool:
        return self.cc.empty

    def __len__(self) -> int:
        return len(self.cc)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self.cc[key]
        mask = np.asarray(key, dtype=bool)
        return PostForkCounts(self.cc[mask], self.turns.rows_of(np.flatnonzero(mask)))


def attach_tree(
    frame: pd.DataFrame, store_or_db: Any, runs: Sequence[str] | None = None
) -> pd.DataFrame:
    """``frame`` (a judgment or conversation x criterion table) with each conversation's
    ``parent_id`` and ``fork_turn`` from the store, so that contrasts can cut shared prefixes."""
    from branchpoint.core.read import conversation_tree

    tree = conversation_tree(store_or_db, runs)
    base = frame.drop(columns=[c for c in ("parent_id", "fork_turn") if c in frame.columns])
    return base.merge(tree, on="conversation_id", how="left")


# --------------------------------------------------------------------------- the same on codes


def coded_tree(tree: Tree, ids: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The ancestry of conversations given as codes (positions in ``ids``), as arrays: ``ids``
    extended by ancestors not in it, ``anc[level, code]`` (the ancestor ``level`` steps up, -1:
    none; level 0 is the conversation itself) and ``shared[level, code]`` (the prefix it shares
    with that ancestor: non-increasing up the chain, inf at level 0)."""
    names = [str(i) for i in ids]
    index = {n: i for i, n in enumerate(names)}
    chains = [list(tree.ancestry(n).items()) for n in names]
    depth = max((len(c) for c in chains), default=1)
    anc = np.full((depth, len(names)), -1, np.int64)
    shared = np.full((depth, len(names)), -np.inf)
    for code, chain in enumerate(chains):
        for level, (node, m) in enumerate(chain):
            if node not in index:
                index[node] = len(names)
                names.append(node)
            anc[level, code] = index[node]
            shared[level, code] = m
    return names, anc, shared


def coded_roots(
    conversation: np.ndarray, turn_index: np.ndarray, anc: np.ndarray, shared: np.ndarray
) -> np.ndarray:
    """``turn_roots`` on codes: for each rating (its conversation's code, its turn index, NaN for
    the whole conversation), the code of the conversation whose own turn it is."""
    t = np.where(np.isnan(turn_index), _WHOLE, turn_index)
    root = anc[0][conversation]
    for level in range(1, len(anc)):
        up = shared[level][conversation] > t  # a prefix: shared shrinks up the chain
        root = np.where(up, anc[level][conversation], root)
    return root


def coded_copies(shared: np.ndarray) -> np.ndarray:
    """Per conversation code: it never diverged from an ancestor (``copied_conversations``)."""
    return (np.isinf(shared[1:]) & (shared[1:] > 0)).any(axis=0)


def first_of_each(
    key: np.ndarray, preferred: np.ndarray, tie: np.ndarray | None = None
) -> np.ndarray:
    """Rows to keep so that each ``key`` is kept once: the first ``preferred`` row holding it,
    else the row of smallest ``tie`` (the conversation id's rank; None: the first row)
    (``distinct_ratings``' rule, without sorting every row when the preferred rows are already
    distinct and in order, the usual case)."""
    keep = np.zeros(len(key), dtype=bool)
    own = np.flatnonzero(preferred)
    k_own = key[own]
    if len(k_own) and not bool((k_own[1:] > k_own[:-1]).all()):
        order = np.argsort(k_own, kind="stable")
        first = np.ones(len(order), dtype=bool)
        first[1:] = k_own[order][1:] != k_own[order][:-1]
        own_kept = np.sort(own[order[first]])
        k_sorted = k_own[order[first]]
    else:
        own_kept, k_sorted = own, k_own
    keep[own_kept] = True
    rest = np.flatnonzero(~preferred)
    if len(rest):
        k_rest = key[rest]
        taken = np.zeros(len(rest), dtype=bool)
        if len(k_sorted):
            pos = np.minimum(np.searchsorted(k_sorted, k_rest), len(k_sorted) - 1)
            taken = k_sorted[pos] == k_rest
        left = rest[~taken]
        if len(left):
            if tie is not None:  # smallest tie first within each key
                left = left[np.lexsort((tie[left], key[left]))]
            _, first_at = np.unique(key[left], return_index=True)
            keep[left[first_at]] = True
    return keep
