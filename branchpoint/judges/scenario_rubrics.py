"""Judging each conversation with the rubric its scenario names (``rubric:``).

``branchpoint judge`` without ``--rubric`` groups the selected conversations by their scenario's
rubric (a bundled name such as ``teen``, ``ed`` or ``kora``, or a rubric path relative to the
scenario file) and judges each group with it. A conversation whose scenario cannot be found or
names no rubric stops the command before anything is judged: guessing a rubric would store
verdicts on criteria nobody chose.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from branchpoint.judges.runner import JudgeSummary, ScenarioContext, _run_scenario_paths, ajudge_run

_CHUNK = 2000


def rubric_reference(scenario: Any) -> str | None:
    """The rubric a scenario names: a bundled name as written, a path made absolute."""
    ref = getattr(scenario, "rubric", None)
    if not ref:
        return None
    from branchpoint.judges.loading import bundled_rubrics

    if ref in bundled_rubrics():
        return str(ref)
    source = getattr(scenario, "source_path", None)
    path = Path(ref).expanduser()
    if not path.is_absolute() and source:
        path = Path(source).resolve().parent / path
    return str(path)


def conversations_by_rubric(
    store: Any,
    run_id: str | None = None,
    *,
    all_runs: bool = False,
    conversation_ids: Sequence[str] | None = None,
) -> dict[str, list[str]]:
    """rubric reference -> ids of the selected conversations whose scenario names it."""
    from branchpoint.core import read
    from branchpoint.core.errors import UserError

    if run_id is None and not all_runs and not conversation_ids:
        raise UserError("give a RUN_ID to judge, or --all for every run in the store")
    if run_id is not None and read.find_run(store, run_id) is None:
        raise UserError(
            f"run {run_id!r} is not in the store (see the run ids that `branchpoint run` printed)"
        )
    context = ScenarioContext()
    groups: dict[str, list[str]] = {}
    unnamed: list[str] = []
    run_paths: dict[str, list[str]] = {}
    for conv in read.select_conversations(store, run_id, conversation_ids):
        if conv.run_id not in run_paths:
            run = read.find_run(store, conv.run_id)
            run_paths[conv.run_id] = _run_scenario_paths(run.config if run else {})
        scenario = context.find(
            conv.scenario_id, [conv.scenario_path or "", *run_paths[conv.run_id]]
        )
        ref = rubric_reference(scenario)
        if ref is None:
            if conv.scenario_id not in unnamed:
                unnamed.append(conv.scenario_id)
            continue
        groups.setdefault(ref, []).append(conv.id)
    if unnamed:
        shown = ", ".join(unnamed[:5]) + (" ..." if len(unnamed) > 5 else "")
        raise UserError(
            f"{len(unnamed)} scenario(s) name no rubric or were not found: {shown} "
            "(expected --rubric NAME_OR_PATH, or a `rubric:` field in each scenario)"
        )
    return groups


def merge_summaries(summaries: Sequence[JudgeSummary]) -> JudgeSummary:
    total = JudgeSummary()
    for summary in summaries:
        for f in fields(JudgeSummary):
            mine, theirs = getattr(total, f.name), getattr(summary, f.name)
            setattr(total, f.name, mine + theirs)
    return total


async def ajudge_by_scenario_rubric(
    run_id: str | None = None,
    *,
    store: Any | None = None,
    db: str | None = None,
    all_runs: bool = False,
    conversation_ids: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[tuple[str, JudgeSummary]]:
    """Judge every selected conversation with its scenario's rubric: ``[(rubric, summary)]``.

    ``kwargs`` are those of :func:`branchpoint.judges.runner.ajudge_run` other than ``rubric``.
    """
    own_store = store is None
    if store is None:
        from branchpoint.core.store import open_store

        store = open_store(db, create=False)
    try:
        groups = conversations_by_rubric(
            store, run_id, all_runs=all_runs, conversation_ids=conversation_ids
        )
        if len(groups) == 1:  # the usual case: judge the selection as given, no id list
            (ref,) = groups
            summary = await ajudge_run(
                run_id,
                store=store,
                rubric=ref,
                all_runs=all_runs,
                conversation_ids=conversation_ids,
                **kwargs,
            )
            return [(ref, summary)]
        out: list[tuple[str, JudgeSummary]] = []
        for ref, ids in groups.items():
            # Chunks keep each query's id list under the database's limit on bound parameters.
            parts = [
                await ajudge_run(
                    None, store=store, rubric=ref, conversation_ids=ids[i : i + _CHUNK], **kwargs
                )
                for i in range(0, len(ids), _CHUNK)
            ]
            out.append((ref, merge_summaries(parts)))
        return out
    finally:
        if own_store:
            store.close()


def judge_by_scenario_rubric(
    run_id: str | None = None, **kwargs: Any
) -> list[tuple[str, JudgeSummary]]:
    """Synchronous :func:`ajudge_by_scenario_rubric`."""
    return asyncio.run(ajudge_by_scenario_rubric(run_id, **kwargs))
