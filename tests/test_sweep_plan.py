"""The sweep's plan: its call counts equal the calls a real sweep makes; tokens and dollars.

The counting test runs the bundled teen library x 3 scripted targets x 2 conditions x 3
replicates (3 exchanges) on a real SQLite store, once with forks shared and once independent.
The targets are scripted so that each pins one event schedule: ``quiet`` never shows an event
(the plan's low count), ``eager`` always does (its high count), ``midway`` from exchange 2.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from core.errors import UserError
from core.read import model_call_count
from core.store import open_store
from simulator.sweep.calls import schedules, tree_calls
from simulator.sweep.manifest import Manifest, load_manifest
from simulator.sweep.plan import plan_sweep
from simulator.sweep.run import run_sweep

SWEEP = Path(__file__).resolve().parent / "fixtures" / "sweep"
MANIFEST = SWEEP / "teen_scripted.yaml"


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.syspath_prepend(str(SWEEP))
    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "sweep_plugin")
    import sweep_plugin

    return sweep_plugin


def _target_calls(store: object, spec: str) -> int:
    from sqlalchemy import func, select

    from core.read.schema import MODEL_CALLS

    m = MODEL_CALLS.c
    q = select(func.count()).where(m.purpose == "target", m.model == spec)
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        return int(conn.execute(q).scalar_one())


@pytest.mark.parametrize("fork", ["shared", "independent"])
def test_plan_call_counts_equal_calls_made(fork: str, tmp_path: Path, plugin: object) -> None:
    manifest = load_manifest(MANIFEST).model_copy(update={"fork": fork})
    store = open_store(tmp_path / "sweep.db")
    plan = plan_sweep(manifest, MANIFEST, "sweep-count", store=store)
    assert plan.cells == plan.cells - plan.done > 1000  # all to do on a new store
    by_target = {t.target: t for t in plan.targets}
    midway_from = plugin.MIDWAY_FROM  # type: ignore[attr-defined]
    midway = {"persona": 0, "target": 0}
    for _, run_plan in plan.runs:
        for tree in run_plan.trees:
            if tree.target == "scripted:midway":
                events = schedules(tree)["always"](1)
                tally = tree_calls(tree, lambda e, ev=events: ev if e >= midway_from else set())
                midway["persona"] += tally.persona_calls
                midway["target"] += tally.target_calls

    result = asyncio.run(run_sweep(plan, store))

    assert result.conversations == plan.cells and result.completed == plan.cells
    quiet, eager = by_target["scripted:quiet"], by_target["scripted:eager"]
    # Independent arms never fork, so every schedule gives the same count: the no-fork one.
    if fork == "independent":
        assert quiet.calls["low"] == quiet.calls["high"] == quiet.calls_independent
    else:
        assert quiet.calls["low"] < quiet.calls["expected"] < quiet.calls["high"]
        assert quiet.calls["high"] < quiet.calls_independent
    made = result.calls["persona"] + result.calls["target"]
    assert made == quiet.calls["low"] + eager.calls["high"] + sum(midway.values())
    assert model_call_count(store, "persona") == result.calls["persona"]
    for spec, level in (("scripted:quiet", "low"), ("scripted:eager", "high")):
        persona = tree_persona_calls(plan, spec, level)
        assert _target_calls(store, spec) == by_target[spec].calls[level] - persona
    assert _target_calls(store, "scripted:midway") == midway["target"]
    store.close()


def tree_persona_calls(plan: object, spec: str, level: str) -> int:
    from simulator.sweep.plan import SCHEDULE_OF

    total = 0
    for _, run_plan in plan.runs:  # type: ignore[attr-defined]
        for tree in run_plan.trees:
            if tree.target == spec:
                total += tree_calls(tree, schedules(tree)[SCHEDULE_OF[level]]).persona_calls
    return total


def _manifest(tmp_path: Path, **fields: object) -> tuple[Manifest, Path]:
    path = tmp_path / "m.yaml"
    path.write_text("x: 1\n", encoding="utf-8")
    base = {
        "scenarios": {"paths": [str(SWEEP.parents[1] / "fixtures" / "engine")]},
        "max_exchanges": 6,
    }
    return Manifest.model_validate({**base, **fields}), path


def test_dollars_grow_quadratically_and_with_the_level(tmp_path: Path) -> None:
    manifest, path = _manifest(
        tmp_path,
        targets=["litellm:openai/gpt-4o-mini"],
        simulators=["scripted:p"],
        fork="independent",  # no forks: calls grow linearly with the exchanges
    )
    short = plan_sweep(manifest.model_copy(update={"max_exchanges": 3}), path, "s").targets[0]
    long = plan_sweep(manifest, path, "s").targets[0]
    low, exp, high = (long.usd[k] for k in ("low", "expected", "high"))
    assert low is not None and exp is not None and high is not None
    assert 0 < low < exp < high
    # Twice the exchanges: 11 calls an arm instead of 5 (the opening is free), but each call's
    # input grows with the history, so input tokens more than triple.
    assert long.calls["low"] * 5 == short.calls["low"] * 11
    assert long.tokens["expected"].input > 3 * short.tokens["expected"].input


def test_unpriced_model_is_an_error_only_with_a_budget(tmp_path: Path) -> None:
    manifest, path = _manifest(tmp_path, targets=["litellm:openai/not-a-real-model-xyz"])
    plan = plan_sweep(manifest, path, "s")
    assert plan.unpriced == ["litellm:openai/not-a-real-model-xyz"]
    assert plan.targets[0].usd["expected"] is None
    budgeted = Manifest.model_validate({**manifest.model_dump(), "budget": {"usd_total": 5}})
    with pytest.raises(UserError, match=r"targets\[0\]\.price: 'litellm:openai/not-a-real"):
        plan_sweep(budgeted, path, "s")
    priced = Manifest.model_validate(
        {
            **budgeted.model_dump(),
            "targets": [
                {
                    "spec": "litellm:openai/not-a-real-model-xyz",
                    "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
                }
            ],
        }
    )
    usd = plan_sweep(priced, path, "s").targets[0].usd["expected"]
    assert usd is not None and usd > 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
