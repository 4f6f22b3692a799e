"""The plan's judging estimate (``branchpoint.study.judge_estimate``): per-turn judge calls are the chatbot turns
the trees make (a shared prefix judged once), conversation rubrics one call per arm, USD at the
judge's price, and the confirmation's bound includes it. Checked against a real sweep whose
scripted chatbot never fires an event, where the plan's ``low`` level is exact."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from branchpoint.study.confirm import cost_check
from branchpoint.study.judge_estimate import estimate_judging
from branchpoint.study.manifest import Manifest
from branchpoint.study.plan import plan_sweep

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"


def manifest(path: Path, judges: list[dict[str, Any]], **extra: Any) -> tuple[Manifest, Path]:
    body = {
        "scenarios": {"paths": [str(SCENARIO)]},
        "targets": ["scripted:quiet"],
        "simulators": ["scripted:sweep-persona"],
        "max_exchanges": 3,
        "replicates": 2,
        "fork": "shared",
        "judges": judges,
        "store": "results.db",
        **extra,
    }
    path.write_text(json.dumps(body), encoding="utf-8")
    return Manifest.model_validate(body), path


def test_per_turn_judge_calls_are_the_chatbot_turns_a_sweep_makes(
    tmp_path: Path, sweep_plugin: Any
) -> None:
    from typer.testing import CliRunner

    from branchpoint.tui.cli import app

    judges = [{"spec": "scripted:na-judge", "rubrics": ["teen"]}]
    m, path = manifest(tmp_path / "study.yaml", judges)
    plan = plan_sweep(m, path, "sweep-study")
    (est,) = estimate_judging(plan)
    assert est.label == "scripted:na-judge / teen (after)"
    assert est.calls["low"] <= est.calls["expected"] <= est.calls["high"]

    out = CliRunner().invoke(app, ["sweep", str(path), "--yes"])
    assert out.exit_code == 0, out.output
    assert "judging included" in out.output and "judging scripted:na-judge / teen" in out.output
    with sqlite3.connect(tmp_path / "results.db") as db:
        (target_calls,) = db.execute(
            "select count(*) from model_calls where purpose = 'target'"
        ).fetchone()
        (judge_calls,) = db.execute(
            "select count(*) from model_calls where purpose = 'judge'"
        ).fetchone()
        (units,) = db.execute("select count(distinct turn_id) from judgments").fetchone()
    # scripted:quiet never shows an event: the low schedule is what ran, call for call
    assert judge_calls == target_calls == est.calls["low"]
    assert units > judge_calls  # the turns arms share up to their fork were copied, not asked


def test_conversation_rubrics_one_call_an_arm_and_the_price_counts(tmp_path: Path) -> None:
    rubric = tmp_path / "whole.yaml"
    teen = (REPO / "branchpoint" / "judges" / "rubrics" / "teen.yaml").read_text(encoding="utf-8")
    rubric.write_text(teen.replace("scope: per_turn", "scope: conversation"), encoding="utf-8")
    spec = "litellm:openai/not-a-real-judge-xyz"
    judges = [
        {
            "spec": spec,
            "rubrics": [str(rubric)],
            "price": {"input_per_mtok": 1, "output_per_mtok": 2},
        }
    ]
    m, path = manifest(tmp_path / "m.yaml", judges)
    plan = plan_sweep(m, path, "s")
    trees_high = plan.total("usd", "high")
    (est,) = estimate_judging(plan)
    # one call an arm; high: each at its most attempts (an answer that does not validate)
    assert est.calls == {"low": plan.cells, "expected": plan.cells, "high": 3 * plan.cells}
    tokens = est.tokens["expected"]
    assert est.usd["expected"] == pytest.approx(tokens.input * 1e-6 + tokens.output * 2e-6)
    assert tokens.input > plan.cells * 1000  # the rubric's prompt is read by every call

    # attached, the judging is in the plan's totals and in the confirmation's bound
    plan.judging = [est]
    assert plan.total("usd", "high") == pytest.approx(trees_high + est.usd["high"])
    check = cost_check(plan)
    assert check.bound == pytest.approx(trees_high + est.usd["high"])
    assert "judging included" in check.reason()


def test_an_unpriced_judge_leaves_the_bound_open(tmp_path: Path) -> None:
    judges = [{"spec": "litellm:openai/not-a-real-judge-xyz", "rubrics": ["teen"]}]
    m, path = manifest(tmp_path / "m.yaml", judges)
    plan = plan_sweep(m, path, "s")
    plan.judging = estimate_judging(plan)
    assert plan.judging[0].usd["expected"] is None
    check = cost_check(plan)
    assert check.bound is None and check.needed  # the plan cannot bound it: sweep asks


def test_finished_conversations_without_an_exchange_cap_are_estimated(tmp_path: Path) -> None:
    # A conversation rubric's finished, unjudged items have no length in the plan (0); with no
    # max_exchanges in the manifest the estimate multiplied None (a TypeError). They now read
    # at most the longest conversation the scenarios allow.
    from branchpoint.judges import load_rubric
    from branchpoint.study.judge_estimate import _estimate

    m, path = manifest(tmp_path / "m.yaml", [{"spec": "scripted:na-judge", "rubrics": ["teen"]}])
    m.max_exchanges = None
    plan = plan_sweep(m, path, "s")
    rubric = load_rubric("teen").model_copy(update={"scope": "conversation"})
    entry = m.judges[0]
    est = _estimate(plan, entry, None, rubric, "teen", None, [0, 0])
    none_left = _estimate(plan, entry, None, rubric, "teen", None, [])
    assert est.calls["low"] == none_left.calls["low"] + 2
    longest = max(tree.max_turns for _, tree, _ in plan.pending)
    read = est.tokens["expected"].input - none_left.tokens["expected"].input
    assert read > 2 * longest  # each reads a whole conversation of the longest length


def test_a_batch_judge_is_planned_at_the_batch_price_with_the_direct_price_beside(
    tmp_path: Path,
) -> None:
    price = {"input_per_mtok": 1, "output_per_mtok": 2}
    base = {"spec": "litellm:openai/not-a-real-judge-xyz", "rubrics": ["teen"], "price": price}
    direct_m, direct_path = manifest(tmp_path / "d.yaml", [base])
    batch_m, batch_path = manifest(tmp_path / "b.yaml", [{**base, "batch": True}])
    factor_m, factor_path = manifest(
        tmp_path / "f.yaml", [{**base, "batch": True, "price": {**price, "batch_factor": 0.4}}]
    )
    direct_plan = plan_sweep(direct_m, direct_path, "s")
    (direct,) = estimate_judging(direct_plan)
    (batched,) = estimate_judging(plan_sweep(batch_m, batch_path, "s"))
    (factored,) = estimate_judging(plan_sweep(factor_m, factor_path, "s"))
    for level in ("low", "expected", "high"):
        full = direct.usd[level]
        assert full is not None and full > 0
        assert direct.usd_other[level] == pytest.approx(full / 2)  # what batching would cost
        assert batched.usd[level] == pytest.approx(full / 2)  # what the plan counts
        assert batched.usd_other[level] == pytest.approx(full)
        assert factored.usd[level] == pytest.approx(full * 0.4)
    direct_plan.judging = [direct]
    (line,) = [ln for ln in direct_plan.lines() if ln.startswith("judging ")]
    assert "(batched: " in line
    direct_plan.judging = [batched]
    (line,) = [ln for ln in direct_plan.lines() if ln.startswith("judging ")]
    assert "USD batched " in line and "(direct: " in line
