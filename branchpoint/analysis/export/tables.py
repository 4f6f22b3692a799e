"""The flat export tables an outside analyst needs to redo the analysis without branchpoint.

Four levels, each joined with its conversation (run, scenario, variant, target, condition,
simulator, replicate, status, the fork tree and one ``choice:<key>`` column per variant choice).
One of them counts observations; the others are the stored rows:

* ``unit`` (the default): one row per unit of analysis, what every count and rate of ``analyze``,
  ``report`` and the other exports uses: a judged chatbot turn x criterion x judge (x rubric and
  prompt version), counted once however many arms of a conversation tree carry it
  (``branchpoint.core.read.units``, the code the analysis runs). The row is the verdict in the arm
  that produced the turn (its conversation columns are that arm's), with ``arms``, the ids of every
  arm that carries it (JSON), and ``n_arms``; ``judgment_id`` joins it to the judgment export for
  the judge's words. Counting its rows gives the report's counts: adding arms that never fork, or
  copying a shared prefix into more arms, adds no row;
* ``turn``: every message of every transcript, copies included: text, reasoning, role, exchange,
  stage, the branch points that fired, the events observed, tokens and cost, and where it came from
  (``origin_turn_id``: the turn a copy was taken from; ``shared_prefix``: the turn lies in a prefix
  that another arm shares, so the same message stands in several transcripts);
* ``judgment``: every stored verdict, copies included (a verdict on a shared-prefix turn is there
  once per arm that carries it, flagged by ``origin_turn_id`` and ``shared_prefix``), with its
  rationale, evidence quotes, panel members, error and the judge's raw output: count its rows and a
  shared turn counts as often as it was copied;
* ``arm``: every conversation x branch point: the option it was assigned, whether it was realised
  (the branch point fired and the option was in force for a persona turn), from which exchange,
  and ``recorded`` (False: the run records no firing at all, so realisation is unknown).

With the turn, judgment and arm files and pandas alone the report's per-protocol post-fork contrast
comes out again (``tests/analysis/test_export_reproduces_the_report.py`` does it): pair the arms on
their keys, keep the pairs both of whose arms realised their option, compare the turns from the
first index at which the two arms' turns stop being the same message (``origin_turn_id`` or
``turn_id``), average each pair's difference in failure proportion within its scenario, then across
scenarios. The unit file alone gives the rate tables' counts and failure proportions
(``tests/analysis/test_export_units.py``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.analysis.export.formats import write_chunks
from branchpoint.analysis.tables.judgments import choice_columns, expand_choices, resolve_runs
from branchpoint.core import read
from branchpoint.core.read.units import Tree

LEVELS = ("unit", "turn", "judgment", "arm")
# Conversations per batch: a few thousand transcripts in memory at a time, whatever the store.
BATCH = 2000

CONVERSATION_COLUMNS = [
    "conversation_id", "run_id", "scenario_id", "scenario_path", "variant_id", "target",
    "condition", "simulator", "replicate", "seed", "conversation_status", "stop_reason", "n_turns",
    "parent_id", "fork_turn",
]  # fmt: skip
TURN_COLUMNS = [
    "turn_id", "turn_index", "exchange", "role", "content", "reasoning", "stage", "branch_state",
    "fired", "events", "event_source", "model", "tokens_in", "tokens_out", "cost", "latency_s",
    "finish_reason", "retries", "origin_turn_id", "shared_prefix",
]  # fmt: skip
JUDGMENT_COLUMNS = [
    "judgment_id", "turn_id", "turn_index", "exchange", "turn_role", "origin_turn_id",
    "shared_prefix", "rubric_id", "rubric_hash", "criterion_id", "risk_area", "judge",
    "prompt_version", "applicable", "verdict", "score", "rationale", "evidence", "members", "error",
    "raw_output", "call_id",
]  # fmt: skip
UNIT_COLUMNS = [
    "turn_id", "turn_index", "exchange", "turn_role", "rubric_id", "rubric_hash", "criterion_id",
    "risk_area", "judge", "prompt_version", "applicable", "verdict", "score", "n_arms", "arms",
    "judgment_id",
]  # fmt: skip
ARM_COLUMNS = ["branch_point", "option", "realised", "realised_exchange", "recorded"]


class Conversations:
    """The conversations of an export, read once (one row each), and their fork tree."""

    def __init__(self, store_or_db: Any, runs: str | Sequence[str] | None) -> None:
        self.store = store_or_db
        self.runs = resolve_runs(store_or_db, runs)
        raw = read.conversation_export_rows(store_or_db, self.runs)
        self.frame = expand_choices(raw.drop(columns=["scenario_hash"]))
        self.choice_columns = sorted(choice_columns(self.frame))
        self.ids = [str(i) for i in self.frame["conversation_id"]]
        self.shared_until = shared_until(self.frame)

    def columns(self, own: Sequence[str]) -> list[str]:
        return [*CONVERSATION_COLUMNS, *own, *self.choice_columns]

    def batches(self, only: Sequence[str] | None = None) -> Iterator[list[str]]:
        """The conversation ids (``only``: those of them), ``BATCH`` at a time, in order."""
        wanted = None if only is None else set(only)
        ids = self.ids if wanted is None else [i for i in self.ids if i in wanted]
        for i in range(0, len(ids), BATCH):
            yield ids[i : i + BATCH]

    def tree_batches(self) -> Iterator[list[str]]:
        """The conversation ids, about ``BATCH`` at a time, each fork tree whole in one batch: a
        copy is resolved to the arm that produced it only when both are read together."""
        tree = Tree(self.frame)
        if not tree.has_forks:
            yield from self.batches()
            return
        trees: dict[str, list[str]] = {}
        for cid in self.ids:  # ancestry lists the arm first, its farthest ancestor last
            trees.setdefault(next(reversed(tree.ancestry(cid))), []).append(cid)
        batch: list[str] = []
        for arms in trees.values():
            batch += arms
            if len(batch) >= BATCH:
                yield batch
                batch = []
        if batch:
            yield batch

    def joined(self, rows: pd.DataFrame) -> pd.DataFrame:
        keep = [*CONVERSATION_COLUMNS, *self.choice_columns]
        return rows.merge(self.frame[keep], on="conversation_id", how="left", validate="m:1")

    def shared(self, rows: pd.DataFrame) -> np.ndarray:
        """Per row (``conversation_id``, ``turn_index``, ``origin_turn_id``): whether the turn lies
        in a prefix shared with another arm. A copy is (its origin is another arm's turn); so is
        an original that a child arm copies (its index is below that child's fork turn)."""
        until = rows["conversation_id"].map(self.shared_until).fillna(0.0).to_numpy(float)
        index = pd.to_numeric(rows["turn_index"], errors="coerce").to_numpy(float)
        copy = rows["origin_turn_id"].notna().to_numpy()
        return copy | (index < until)


def shared_until(conversations: pd.DataFrame) -> dict[str, float]:
    """conversation id -> how many of its leading turns some child arm copies (inf: a child never
    diverged from it). A child's ``fork_turn`` is its first own turn; its ``parent_id`` the arm
    it copied."""
    out: dict[str, float] = {}
    for parent, fork in conversations[["parent_id", "fork_turn"]].itertuples(index=False):
        if not isinstance(parent, str) or not parent:
            continue
        n = math.inf if fork is None or fork != fork else float(fork)
        out[parent] = max(out.get(parent, 0.0), n)
    return out


def turn_chunks(conv: Conversations) -> Iterator[pd.DataFrame]:
    for ids in conv.batches():
        rows = read.turn_export_rows(conv.store, ids)
        rows["shared_prefix"] = conv.shared(rows)
        yield conv.joined(rows)


def judgment_chunks(
    conv: Conversations, rubric: str | None = None, judge: str | None = None
) -> Iterator[pd.DataFrame]:
    for ids in conv.batches():
        rows = read.judgment_export_rows(conv.store, ids, rubric=rubric, judge=judge)
        flags = conv.shared(rows)
        # A verdict on the whole conversation belongs to no turn: neither shared nor own.
        whole = rows["turn_index"].isna().to_numpy()
        rows["shared_prefix"] = pd.Series(flags, dtype=object).where(~whole, None).to_numpy()
        yield conv.joined(rows)


def unit_chunks(
    conv: Conversations, rubric: str | None = None, judge: str | None = None
) -> Iterator[pd.DataFrame]:
    """The units of analysis, a batch of whole fork trees at a time (``distinct_ratings`` and
    ``carrying_arms``: the rule every count uses)."""
    tree = conv.frame[["conversation_id", "parent_id", "fork_turn"]]
    for ids in conv.tree_batches():
        rows = read.judgment_export_rows(conv.store, ids, rubric=rubric, judge=judge, words=False)
        rows = rows.merge(tree, on="conversation_id", how="left", validate="m:1")
        kept = read.distinct_ratings(rows)
        arms = read.carrying_arms(rows, kept)
        text: dict[tuple[str, ...], str] = {}  # the units of one stretch of turns share arms
        kept = kept.drop(columns=["parent_id", "fork_turn"]).assign(
            n_arms=[len(a) for a in arms],
            arms=[text.get(a) or text.setdefault(a, json.dumps(list(a))) for a in arms],
        )
        yield conv.joined(kept)


def arm_table(conv: Conversations) -> pd.DataFrame:
    rows = read.realisation_rows(conv.store, conv.runs).rename(
        columns={"exchange": "realised_exchange"}
    )
    return conv.joined(rows)


def export_level(
    store_or_db: Any,
    level: str,
    out: str | os.PathLike[str],
    fmt: str,
    run: str | Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
) -> int:
    """Write one export level (``LEVELS``) as csv, parquet or jsonl; returns the rows written."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    conv = Conversations(store_or_db, run)
    if level == "unit":
        return write_chunks(unit_chunks(conv, rubric, judge), out, fmt, conv.columns(UNIT_COLUMNS))
    if level == "turn":
        return write_chunks(turn_chunks(conv), out, fmt, conv.columns(TURN_COLUMNS))
    if level == "judgment":
        return write_chunks(
            judgment_chunks(conv, rubric, judge), out, fmt, conv.columns(JUDGMENT_COLUMNS)
        )
    return write_chunks([arm_table(conv)], out, fmt, conv.columns(ARM_COLUMNS))
