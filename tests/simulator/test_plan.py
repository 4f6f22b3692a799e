"""A run's plan is plain data: it pickles, and a worker process that executes it writes what the
normal path writes."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fixtures.engine.helpers import HERE as FIX
from fixtures.engine.helpers import conversations, plugin_env, turns_of
from sqlmodel import select

from branchpoint.core.errors import UserError
from branchpoint.core.records import Run
from branchpoint.core.store import open_store
from branchpoint.simulator.plan import RunPlan, plan_run
from branchpoint.simulator.run_config import RunConfig


def _config(run_id: str, **over: Any) -> RunConfig:
    fields: dict[str, Any] = {
        "scenarios": [str(FIX / "at_turn.yaml"), str(FIX / "on_event.yaml")],
        "targets": ["scripted:slowbot"],
        "simulator": "scripted:persona",
        "conditions": ["none", "teen_aware"],
        "replicates": 2,
        "run_id": run_id,
        "target_params": {"temperature": 0, "api_key": "sk-never-in-a-plan-record"},
    }
    return RunConfig(**(fields | over))


def test_plan_lists_every_tree_with_its_prompt_resolved_and_pickles_equal() -> None:
    from branchpoint.scenarios.conditions import load_conditions

    plan = plan_run(_config("r-plan"))
    # 2 scenarios x 1 target x 2 conditions x 2 replicates
    assert len(plan.trees) == 8
    teen_aware = load_conditions()["teen_aware"].system_prompt
    for tree in plan.trees:
        assert tree.system_prompt == (teen_aware if tree.condition == "teen_aware" else None)
        assert tree.seed == tree.replicate  # config.seed 0 + replicate
    ids = [a.conversation_id for t in plan.trees for a in t.arms]
    assert len(ids) == len(set(ids))
    assert plan.turn_budget == sum(len(t.arms) * t.max_turns * 2 for t in plan.trees)
    assert "sk-never" not in repr(plan.target_params_record)

    copy = pickle.loads(pickle.dumps(plan))
    assert isinstance(copy, RunPlan) and copy == plan
    assert copy is not plan and copy.trees[0].scenario is not plan.trees[0].scenario
    # the same config plans the same conversation ids: a resume finds its conversations
    assert plan_run(_config("r-plan")) == plan


def test_a_bad_variant_fails_in_planning_before_the_store_is_touched(tmp_path: Path) -> None:
    import asyncio

    from branchpoint.simulator.runner import run

    db = tmp_path / "v.db"
    config = _config("r-bad", variants=["deadbeef"], db=str(db))
    with pytest.raises(UserError, match="no such variant"):
        plan_run(config)
    with pytest.raises(UserError, match="no such variant"):
        asyncio.run(run(config))
    store = open_store(db)
    try:
        with store.session() as s:
            assert s.exec(select(Run)).all() == []
    finally:
        store.close()


def _transcripts(store: Any, run_id: str) -> dict[str, Any]:
    out = {}
    for conv in conversations(store, run_id):
        out[conv.id] = (
            conv.variant_id,
            conv.condition,
            conv.replicate,
            conv.status,
            conv.stop_reason,
            conv.n_turns,
            conv.parent_id,
            conv.fork_turn,
            conv.choices,
            conv.target_params,
            [
                (t.index, t.role, t.content, t.stage, t.events, t.origin_turn_id)
                for t in turns_of(store, conv.id)
            ],
        )
    return out


@pytest.mark.slow
def test_a_pickled_plan_executed_in_a_worker_process_writes_the_normal_transcripts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from branchpoint.simulator.lifecycle import begin_run
    from branchpoint.simulator.runner import run

    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "engine_plugin")
    monkeypatch.setenv("ENGINE_TEST_DELAY_S", "0")
    config = _config("r-ship")

    normal = open_store(tmp_path / "normal.db")
    asyncio.run(run(config, store=normal))

    # The coordinator's part: plan, create the run row, ship the plan (here: through a file).
    shipped = open_store(tmp_path / "shipped.db")
    plan = plan_run(config)
    begin_run(shipped, plan.run_id, config, owner="test-coordinator")
    plan_file = tmp_path / "plan.pickle"
    plan_file.write_bytes(pickle.dumps(plan))
    proc = subprocess.run(
        [sys.executable, str(FIX / "plan_worker.py"), str(plan_file), str(tmp_path / "shipped.db")],
        env=plugin_env(0.0),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    try:
        expected = _transcripts(normal, "r-ship")
        got = _transcripts(shipped, "r-ship")
        n_arms = sum(len(t.arms) for t in plan.trees)
        assert len(expected) == n_arms and proc.stdout.startswith(f"{n_arms} arms")
        # forks happened (so shared prefixes were shipped too), and every arm has turns
        assert any(v[7] is not None for v in expected.values())
        assert all(v[5] > 0 for v in expected.values())
        assert got == expected
    finally:
        normal.close()
        shipped.close()
