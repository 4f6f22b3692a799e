"""Runs, and the conversations of one run in the order its summary lists them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from branchpoint.core.read.schema import CONVERSATIONS, RUNS
from branchpoint.core.read.source import StoreRef, read_frame
from branchpoint.core.records import Conversation, Run
from branchpoint.core.store import Store

if TYPE_CHECKING:
    import pandas as pd


def run_table(ref: StoreRef) -> pd.DataFrame:
    """One row per run (id, kind, name, status, created_at), oldest first."""
    r = RUNS.c
    return read_frame(
        select(r.id, r.kind, r.name, r.status, r.created_at).order_by(r.created_at), ref
    )


def run_config_hashes(ref: StoreRef, runs: Sequence[str] | None = None) -> dict[str, str]:
    """Run id -> the hash of its resolved configuration, for the runs that recorded one."""
    import json

    r = RUNS.c
    q = select(r.id, r.config)
    if runs is not None:
        q = q.where(r.id.in_(list(runs)))
    out: dict[str, str] = {}
    for run_id, config in read_frame(q, ref).itertuples(index=False):
        data = json.loads(config) if isinstance(config, str) else config  # JSON text on SQLite
        if isinstance(data, dict) and data.get("config_hash"):
            out[str(run_id)] = str(data["config_hash"])
    return out


def _configs(
    ref: StoreRef, runs: Sequence[str] | None, kind: str | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(run id, its stored config as a dict) for the runs named (all where None)."""
    import json

    r = RUNS.c
    q = select(r.id, r.config)
    if kind is not None:
        q = q.where(r.kind == kind)
    if runs is not None:
        q = q.where(r.id.in_(list(runs)))
    for run_id, config in read_frame(q, ref).itertuples(index=False):
        data = json.loads(config) if isinstance(config, str) else config
        if isinstance(data, dict):
            yield str(run_id), data


def analysis_registrations(
    ref: StoreRef, runs: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Sweep id -> its pre-registered analysis (``branchpoint.core.analysis_plan``: block, hash,
    registered_at, deviations), for the sweeps that registered a block."""
    out: dict[str, dict[str, Any]] = {}
    for run_id, data in _configs(ref, runs):
        plan = data.get("analysis_plan")
        if isinstance(plan, dict) and plan.get("block") is not None:
            out[run_id] = plan
    return out


# What a sweep's manifest says of its design, as against its chatbots, judges and machinery:
# two stores compared chatbot against chatbot should agree on these.
DESIGN_FIELDS = ("conditions", "simulators", "simulator_params", "replicates", "seed",
                 "max_exchanges", "fork")  # fmt: skip


def sweep_designs(ref: StoreRef, runs: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """Sweep id -> its manifest's design (``DESIGN_FIELDS``, with the scenario files' hashes)."""
    out: dict[str, dict[str, Any]] = {}
    for run_id, data in _configs(ref, runs, kind="sweep"):
        manifest = data.get("manifest")
        if isinstance(manifest, dict):
            design = {k: manifest.get(k) for k in DESIGN_FIELDS}
            design["scenarios"] = sorted((data.get("scenario_hashes") or {}).values())
            out[run_id] = design
    return out


def find_run(store: Store, run_id: str) -> Run | None:
    with store.session() as s:
        return s.get(Run, run_id)


def run_conversations(store: Store, run_id: str) -> list[Conversation]:
    """The conversations of a run by scenario, target, condition and replicate, then creation."""
    c = CONVERSATIONS.c
    q = (
        select(Conversation)
        .where(c.run_id == run_id)
        .order_by(c.scenario_id, c.target, c.condition, c.replicate, c.created_at)
    )
    with store.session() as s:
        return list(s.scalars(q).all())
