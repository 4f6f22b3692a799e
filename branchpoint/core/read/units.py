"""The unit of analysis, defined once: a judged chatbot turn x criterion x judge, counted once
however many arms of a conversation tree carry it.

Arms that agree up to a branch point store the very same prefix: each arm names the arm whose
prefix it copies (``parent_id``) and the index of its first own turn (``fork_turn``; None: it
never diverged). A copied turn, and every verdict on it, is one observation wherever it is
counted: rates, ED scores, the reasoning table, agreement, the labelling design's frame and the
judge correction all read ``distinct_ratings`` (or ``judged_items``, built on it), and so does the
unit export (``branchpoint export --level unit``, with ``carrying_arms``); contrasts compare only
the turns after the fork (``branchpoint.analysis.pairing.forks``).

Pure pandas / numpy over frames the read layer returns, so that both the read layer
(``branchpoint.core.read.labels.judged_items``) and analysis use the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd


class Tree:
    """The fork tree of the conversations in a frame (``parent_id`` and ``fork_turn`` columns)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.parent: dict[str, str] = {}
        self.fork: dict[str, float] = {}
        if "parent_id" in frame.columns:
            cols = ["conversation_id", "parent_id"] + (
                ["fork_turn"] if "fork_turn" in frame.columns else []
            )
            conv = frame[cols].drop_duplicates("conversation_id")
            # Columns as lists (the values ``itertuples`` gives, without a tuple per row)
            forks = conv["fork_turn"].tolist() if len(cols) > 2 else [None] * len(conv)
            for cid, parent, f in zip(
                conv["conversation_id"].tolist(), conv["parent_id"].tolist(), forks
            ):
                if isinstance(parent, str) and parent:
                    self.parent[str(cid)] = parent
                    self.fork[str(cid)] = math.inf if f is None or f != f else float(f)
        self._ancestry: dict[str, dict[str, float]] = {}
        self._root: dict[str, str] = {}

    @property
    def has_forks(self) -> bool:
        return bool(self.parent)

    def ancestry(self, cid: str) -> dict[str, float]:
        """Ancestor (and self) -> length of the prefix this conversation shares with it."""
        got = self._ancestry.get(cid)
        if got is not None:
            return got
        out = {cid: math.inf}
        shared, cur, seen = math.inf, cid, {cid}
        while cur in self.parent and self.parent[cur] not in seen:
            shared = min(shared, self.fork.get(cur, math.inf))
            cur = self.parent[cur]
            seen.add(cur)
            out[cur] = shared
        self._ancestry[cid] = out
        return out

    def divergence(self, a: str, b: str) -> float:
        """Index of the first turn that ``a`` and ``b`` do not share (0: nothing shared)."""
        if a == b:
            return math.inf
        anc_a, anc_b = self.ancestry(a), self.ancestry(b)
        best = 0.0
        for node, m_a in anc_a.items():
            m_b = anc_b.get(node)
            if m_b is not None:
                best = max(best, min(m_a, m_b))
        return best

    def content_root(self, cid: str) -> str:
        """The farthest ancestor this arm never diverged from (itself when it forked): the
        conversation whose transcript it is."""
        got = self._root.get(cid)
        if got is not None:
            return got
        root = cid
        for node, shared in self.ancestry(cid).items():
            if shared == math.inf:
                root = node
        self._root[cid] = root  # asked for every pair of every contrast: found once
        return root

    def divergences(self, a: Iterable[str], b: Iterable[str]) -> np.ndarray:
        """``divergence`` of each pair, computed once per distinct pair (a contrast repeats
        each pair of arms for every criterion)."""
        a_codes, a_names = pd.factorize(_ids(a), use_na_sentinel=False)
        b_codes, b_names = pd.factorize(_ids(b), use_na_sentinel=False)
        if not len(a_codes):
            return np.zeros(0, dtype=float)
        pair = a_codes.astype(np.int64) * (len(b_names) + 1) + b_codes
        inv, uniq = pd.factorize(pair)  # each distinct pair once (hashed, not sorted)
        width = len(b_names) + 1
        a_text = [str(x) for x in a_names]  # indexing a categorical per pair was 0.4 s
        b_text = [str(x) for x in b_names]
        got = np.array(
            [self.divergence(a_text[u // width], b_text[u % width]) for u in uniq], dtype=float
        )
        return got[inv.reshape(-1)]


def _ids(values: Iterable[str]) -> Any:
    """Conversation ids as ``pd.factorize`` takes them (a categorical as it is: its codes)."""
    if isinstance(values, (pd.Categorical, pd.Series, np.ndarray)):
        return values
    return np.asarray(list(values), dtype=object)


# --------------------------------------------------------------------------- the unit of analysis

# A judgment's identity apart from the conversation that carries it: the same criterion rated by
# the same judge under the same rubric and prompt version.
RATING_KEYS = ["rubric_id", "rubric_hash", "criterion_id", "judge", "prompt_version"]
# A whole-conversation rating (no turn index) is a copy only when the whole arm is.
_WHOLE = 1e300


def turn_roots(frame: pd.DataFrame, tree: Tree | None = None) -> np.ndarray:
    """For each row (``conversation_id``, ``turn_index``): the conversation whose own turn it is.

    Arm X copies turns ``[0, fork_turn(X))`` from its parent (all of them when it never forked),
    so the turn at index t of X is the parent's turn t when t < fork_turn(X), and so on up the
    tree: its root is the farthest ancestor whose shared prefix with X still covers t. A
    whole-conversation rating belongs to X unless X never diverged from an ancestor at all.
    """
    cids = frame["conversation_id"].astype(str).to_numpy()
    tree = tree or Tree(frame)
    if not tree.has_forks:
        return cids
    t = pd.to_numeric(frame["turn_index"], errors="coerce").to_numpy(float)
    t = np.where(np.isnan(t), _WHOLE, t)
    out = cids.copy()
    codes, uniques = pd.factorize(cids)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(uniques) + 1))
    for i, cid in enumerate(uniques):
        chain = tree.ancestry(str(cid))  # self first, then each ancestor with its shared prefix
        if len(chain) == 1:
            continue
        nodes = np.array(list(chain), dtype=object)
        shared = np.array(list(chain.values()), dtype=float)  # non-increasing up the chain
        rows = order[bounds[i] : bounds[i + 1]]
        depth = (shared[:, None] > t[rows][None, :]).sum(axis=0)
        out[rows] = nodes[np.maximum(depth - 1, 0)]
    return out


def copied_conversations(frame: pd.DataFrame, tree: Tree | None = None) -> set[str]:
    """Arms that never diverged from an ancestor: the same transcript stored again."""
    tree = tree or Tree(frame)
    return {
        cid for cid in frame["conversation_id"].astype(str).unique()
        if any(m == math.inf for node, m in tree.ancestry(cid).items() if node != cid)
    }  # fmt: skip


def distinct_ratings(judgments: pd.DataFrame, level: str = "turn") -> pd.DataFrame:
    """The judgment table with every copied rating counted once: the unit of analysis.

    ``turn``: a judged chatbot turn counts once however many arms carry it (a shared-prefix turn
    is kept in the arm that produced it, its root; see ``turn_roots``). ``conversation``: an
    arm that never diverged is the same conversation stored again and is left out; an arm that
    forked is a conversation of its own, its shared prefix included (a conversation fails when
    any of its turns does). Needs ``parent_id`` / ``fork_turn``; without them nothing is a copy.
    """
    if judgments.empty or "parent_id" not in judgments.columns:
        return judgments
    tree = Tree(judgments)
    if not tree.has_forks:
        return judgments
    if level == "conversation":
        copies = copied_conversations(judgments, tree)
        return judgments[~judgments["conversation_id"].astype(str).isin(copies)]
    if level != "turn":
        raise ValueError(f"level must be 'turn' or 'conversation', not {level!r}")
    roots = turn_roots(judgments, tree)
    keys = [c for c in RATING_KEYS if c in judgments.columns]
    work = judgments[keys].astype(str)
    work["_root"] = roots
    work["_turn"] = pd.to_numeric(judgments["turn_index"], errors="coerce").fillna(-1).to_numpy()
    # Prefer the row stored on the root conversation itself (its own turn, not a copy); where
    # the root lacks it, the copy on the smallest conversation id (an order-free rule: the
    # judgment summaries do not know the order rows were written in).
    cids = judgments["conversation_id"].astype(str).to_numpy()
    work["_own"] = cids != roots
    order = np.lexsort((pd.factorize(cids, sort=True)[0], work["_own"].to_numpy()))
    keep = ~work.iloc[order].duplicated([*keys, "_root", "_turn"]).to_numpy()
    return judgments.iloc[np.sort(order[keep])]


def _unit_codes(
    judgments: pd.DataFrame, kept: pd.DataFrame, tree: Tree
) -> tuple[np.ndarray, np.ndarray]:
    """An integer per row of ``judgments`` and of ``kept`` (its rows), equal where two rows are
    the same unit of analysis whichever arm carries them: the rating's identity
    (``RATING_KEYS``), the conversation whose own turn it is and the turn index."""
    pos = judgments.index.get_indexer(kept.index) if judgments.index.is_unique else None
    both = judgments if pos is not None and (pos >= 0).all() else pd.concat([judgments, kept])
    keys = [c for c in RATING_KEYS if c in both.columns]
    work = both[keys].astype(str)
    work["_root"] = turn_roots(both, tree)
    work["_turn"] = pd.to_numeric(both["turn_index"], errors="coerce").fillna(-1).to_numpy()
    codes = work.groupby(list(work.columns), sort=False).ngroup().to_numpy()
    if both is judgments:
        return codes, codes[pos]
    return codes[: len(judgments)], codes[len(judgments) :]


def carriers(judgments: pd.DataFrame, kept: pd.DataFrame) -> np.ndarray:
    """For each row of ``kept`` (``distinct_ratings(judgments)``): how many arms of
    ``judgments`` carry that rating (1: no other arm has a copy of it); the length of each
    ``carrying_arms`` list, without the lists."""
    if kept.empty:
        return np.zeros(0, np.int64)
    if "parent_id" not in judgments.columns or not Tree(judgments).has_forks:
        return np.ones(len(kept), np.int64)
    codes, kept_codes = _unit_codes(judgments, kept, Tree(judgments))
    arm = pd.factorize(judgments["conversation_id"].astype(str))[0].astype(np.int64)
    pairs = np.unique(codes.astype(np.int64) * (int(arm.max()) + 1) + arm)  # an arm once a unit
    per_unit = np.bincount(pairs // (int(arm.max()) + 1), minlength=int(kept_codes.max()) + 1)
    return np.maximum(per_unit[kept_codes], 1)


def carrying_arms(judgments: pd.DataFrame, kept: pd.DataFrame) -> list[tuple[str, ...]]:
    """For each row of ``kept`` (``distinct_ratings(judgments)``): the conversation ids of the
    arms of ``judgments`` that carry that rating, sorted, each once (its own arm alone: no other
    arm has a copy of it). What the unit export lists beside each unit."""
    own: list[tuple[str, ...]] = [(str(c),) for c in kept["conversation_id"]]
    if kept.empty or "parent_id" not in judgments.columns:
        return own
    tree = Tree(judgments)
    if not tree.has_forks:
        return own
    codes, kept_codes = _unit_codes(judgments, kept, tree)
    cids = judgments["conversation_id"].astype(str).to_numpy()
    order = np.lexsort((cids, codes))  # by unit, then by conversation id
    n = max(int(codes.max()), int(kept_codes.max())) + 1
    bounds = np.searchsorted(codes[order], np.arange(n + 1))
    out = []
    for k, mine in zip(kept_codes, own):
        # dict.fromkeys: an arm that holds two rows of one unit (judged twice) is one arm
        arms = tuple(dict.fromkeys(cids[order[bounds[k] : bounds[k + 1]]].tolist()))
        out.append(arms or mine)
    return out


def with_tree(frame: pd.DataFrame, ref: Any, runs: Any = None) -> pd.DataFrame:
    """``frame`` (rows with a ``conversation_id``) with each conversation's ``parent_id`` and
    ``fork_turn`` from the store: what ``distinct_ratings`` needs to find the copies."""
    from branchpoint.core.read.conversations import conversation_tree

    tree = conversation_tree(ref, runs)
    base = frame.drop(columns=[c for c in ("parent_id", "fork_turn") if c in frame.columns])
    return base.merge(tree, on="conversation_id", how="left")


def own_turns(frame: pd.DataFrame, tree: Tree) -> pd.DataFrame:
    """The rows of ``frame`` (``conversation_id``, ``turn_index``) on a turn their arm produced:
    a copy of a parent's turn is left out (for a frame of turns that carry no rating, such as the
    replies a judge should have rated)."""
    if frame.empty or not tree.has_forks:
        return frame
    return frame[turn_roots(frame, tree) == frame["conversation_id"].astype(str).to_numpy()]
