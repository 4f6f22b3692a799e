"""Which conversations of two chatbots are compared with which: the pairing of design cells,
kept apart from the statistics (``comparison``) that run on the pairs.

Two chatbots are compared on the same design cell: scenario, variant (the arm's choices),
condition, simulator and replicate. The two sides come either from one store (two targets of it)
or from two stores run from one manifest (a release and the next: the same target spec, or not).
Either way the judgment tables are put side by side in one frame whose ``target`` column holds
the side's label (the target spec, with its store when both sides run one spec), so that the project's matched pairing (``branchpoint.analysis.contrasts.matched``)
pairs them as it pairs the arms of any other contrast.

From two stores, conversation ids could repeat (a sweep's ids derive from its cells), so each
side's ids are prefixed in the frame (``a/`` and ``b/``); ``store_conversation_id`` strips the
prefix for the links to the transcripts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from branchpoint.analysis.pairing.forks import attach_tree
from branchpoint.analysis.survival.first_failure import with_endings
from branchpoint.analysis.tables.judgments import choice_columns, judgment_table
from branchpoint.core.errors import UserError

SIDE = "target"  # the column that holds each row's side label
# A pair shares these; the run is not among them, so that two stores (two runs) pair too.
CELL_KEYS = ["scenario_id", "variant_id", "condition", "simulator", "replicate"]
PREFIXES = ("a/", "b/")


@dataclass
class Side:
    """One side of a comparison: a target of a store (and its runs: None, every run)."""

    store: Any
    target: str
    runs: Sequence[str] | None = None
    store_label: str = ""  # how the report names the store (its path), for two-store comparisons


@dataclass
class Aligned:
    """The two sides' judgments in one frame, ready for matched pairing."""

    judgments: pd.DataFrame
    label_a: str
    label_b: str
    match: list[str]  # the columns a pair shares
    two_stores: bool
    notes: list[str] = field(default_factory=list)


def side_labels(a: Side, b: Side, two_stores: bool) -> tuple[str, str]:
    """The sides' names in tables: the target specs, or with their stores when those are equal."""
    if a.target != b.target:
        return a.target, b.target
    if not two_stores:
        raise UserError(f"--a and --b name the same target {a.target!r} of one store")
    return f"{a.target} ({a.store_label or 'A'})", f"{b.target} ({b.store_label or 'B'})"


def _side_table(side: Side, label: str, prefix: str) -> pd.DataFrame:
    jt = judgment_table(side.store, side.runs)
    jt = with_endings(attach_tree(jt, side.store, side.runs), side.store, side.runs)
    targets = sorted(jt["target"].dropna().astype(str).unique())
    if side.target not in targets:
        where = f" of {side.store_label}" if side.store_label else ""
        raise UserError(
            f"target {side.target!r} has no judged conversation in the store{where} "
            f"(targets: {', '.join(targets) or 'none'})"
        )
    out = jt[jt["target"].astype(str) == side.target].copy()
    out[SIDE] = label
    if prefix:
        out["conversation_id"] = prefix + out["conversation_id"].astype(str)
        has_parent = out["parent_id"].notna()
        out.loc[has_parent, "parent_id"] = prefix + out.loc[has_parent, "parent_id"].astype(str)
    return out


def align(a: Side, b: Side, *, two_stores: bool) -> Aligned:
    """Both sides' judgment tables in one frame, labelled by side (see the module docstring)."""
    label_a, label_b = side_labels(a, b, two_stores)
    pa, pb = PREFIXES if two_stores else ("", "")
    ta = _side_table(a, label_a, pa)
    tb = _side_table(b, label_b, pb)
    both = pd.concat([ta, tb], ignore_index=True)
    # The arm's choices too: an arm whose branch point never fired keeps its parent's variant.
    match = [*CELL_KEYS, *choice_columns(both)]
    notes = []
    cells_a = set(map(tuple, ta[CELL_KEYS].astype(str).drop_duplicates().to_numpy()))
    cells_b = set(map(tuple, tb[CELL_KEYS].astype(str).drop_duplicates().to_numpy()))
    if not cells_a & cells_b:
        raise UserError(
            f"{label_a} and {label_b} share no design cell (scenario, variant, condition, "
            "simulator, replicate): nothing to compare; were both run from one manifest?"
        )
    only = len(cells_a ^ cells_b)
    if only:
        notes.append(f"{only} design cells ran for one side only: left out of the comparison")
    if two_stores:
        notes += _design_differences(a, b)
    return Aligned(both, label_a, label_b, match, two_stores, notes)


def _design_differences(a: Side, b: Side) -> list[str]:
    """A note when the two stores' sweeps were run from different designs (one manifest is what
    the comparison of a release and the next assumes): the cells still match by name, but what
    differs besides the chatbot is not held equal."""
    from branchpoint.core.read import sweep_designs

    da, db = sweep_designs(a.store, a.runs), sweep_designs(b.store, b.runs)
    if not da or not db:
        return []
    fields = sorted({k for x in da.values() for y in db.values() for k in x if x[k] != y.get(k)})
    if not fields:
        return []
    return [
        f"the two stores' sweeps differ in {', '.join(fields)} (not one manifest): cells are "
        "matched by scenario, variant, condition, simulator and replicate, but those "
        "differences are not held equal between A and B"
    ]


def store_conversation_id(cid: str) -> str:
    """The conversation's id in its own store (the frame's prefix, if any, removed)."""
    for p in PREFIXES:
        if cid.startswith(p):
            return cid[len(p) :]
    return cid
