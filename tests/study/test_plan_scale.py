"""The plan at scale (issue 33, Build 3): alike trees counted once give the numbers of counting
every tree, and a sweep too large to plan in seconds is refused with one positioned line.

The reference below is the plan's former per-tree enumeration, kept here: every tree's calls
replayed (``tree_calls``) and its tokens, dollars, limiter load, judge calls and matched pairs
added one tree at a time."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from branchpoint.core.errors import UserError
from branchpoint.gateway.pricing import Tokens
from branchpoint.gateway.specs import parse_spec
from branchpoint.judges.llm_judge import DEFAULT_MAX_RETRIES
from branchpoint.simulator.call_tally import schedules, tree_calls
from branchpoint.study.costs import LEVELS, tree_cost
from branchpoint.study.detectable import tree_pairs
from branchpoint.study.judge_estimate import estimate_judging
from branchpoint.study.manifest import load_manifest
from branchpoint.study.plan import MAX_CELLS, SCHEDULE_OF, model_prices, plan_sweep
from branchpoint.study.timing import latency_of

ROOT = Path(__file__).resolve().parents[2]
TEEN = ROOT / "branchpoint" / "scenarios" / "library" / "teen"

MODERATE = f"""\
scenarios:
  paths: [{TEEN}]
targets:
  - spec: scripted:quiet
    params: {{max_tokens: 50}}
    price: {{input_per_mtok: 1.0, output_per_mtok: 3.0}}
  - spec: scripted:eager
    price: {{input_per_mtok: 2.0, output_per_mtok: 5.0}}
  - scripted:midway
conditions: [none, teen_aware]
simulators: [scripted:p1, scripted:p2]
detector: {{spec: scripted:detector}}
judges:
  - {{spec: scripted:judge, rubrics: [teen], when: after,
      price: {{input_per_mtok: 0.5, output_per_mtok: 1.0}}}}
replicates: 3
max_exchanges: 7
"""


def _reference(sweep):  # type: ignore[no-untyped-def]
    """Calls, tokens, dollars, limiter load, judge calls and pairs, enumerated tree by tree."""
    prices = model_prices(sweep.manifest)
    calls: Counter[tuple[str, str]] = Counter()
    independent: Counter[str] = Counter()
    tokens: dict[tuple[str, str], Tokens] = {}
    usd: Counter[tuple[str, str]] = Counter()
    load_calls: Counter[tuple[str, str]] = Counter()
    judge_calls: Counter[str] = Counter()
    serial: Counter[str] = Counter()
    pairs: Counter[tuple[object, ...]] = Counter()
    for _, plan in sweep.runs:
        detector = plan.detector
        for tree in plan.trees:
            for key, n in tree_pairs(tree).items():
                pairs[(key, tree.condition, tree.scenario.id)] += n
            plans = schedules(tree)
            alone = tree_calls(tree, plans["never"], fork="independent")
            extra = 2 if detector else 1
            independent[tree.target] += alone.persona_calls + alone.target_calls * extra
            for i, level in enumerate(LEVELS):
                tally = tree_calls(tree, plans[SCHEDULE_OF[level]])
                cost = tree_cost(
                    level,
                    tally,
                    system_prompt=tree.system_prompt,
                    persona_max=plan.persona_params.max_tokens,
                    target_max=tree.target_params.max_tokens,
                    persona_retries=plan.persona_retries,
                    detector=detector is not None,
                )
                calls[(tree.target, level)] += cost.calls
                judge_calls[level] += tally.target_calls  # a per-turn rubric: one a reply
                total = tokens.setdefault((tree.target, level), Tokens())
                for spec, tok, n in [
                    (tree.target, cost.target, cost.target_calls),
                    (tree.simulator, cost.persona, cost.persona_calls),
                    *([(detector, cost.detector, cost.detector_calls)] if detector else []),
                ]:
                    total.add(tok)
                    usd[(tree.target, level)] += tok.usd(prices[spec])  # type: ignore[arg-type]
                    load_calls[(spec, level)] += n
                per_target = latency_of(parse_spec(tree.target).kind)[i]
                per_target += latency_of(parse_spec(detector).kind)[i] if detector else 0
                per_persona = latency_of(parse_spec(tree.simulator).kind)[i]
                serial[level] += cost.persona_calls * per_persona + tally.target_calls * per_target
    return calls, independent, tokens, usd, load_calls, judge_calls, serial, pairs


def test_alike_trees_counted_once_equal_every_tree_counted(tmp_path: Path) -> None:
    path = tmp_path / "moderate.yaml"
    path.write_text(MODERATE)
    sweep = plan_sweep(load_manifest(path), path, "s")
    calls, independent, tokens, usd, load_calls, judge_calls, serial, pairs = _reference(sweep)
    assert sweep.cells == 198 * 3 * 2 * 2 * 3  # every teen variant, no cell done
    for est in sweep.targets:
        assert est.calls_independent == independent[est.target]
        for level in LEVELS:
            assert est.calls[level] == calls[(est.target, level)] > 0
            assert est.tokens[level] == tokens[(est.target, level)]
            assert est.usd[level] == pytest.approx(usd[(est.target, level)], rel=1e-12)
    # low < expected < high: the event schedules matter at 7 exchanges, so the grouping must
    # keep the levels apart
    assert calls[("scripted:eager", "low")] < calls[("scripted:eager", "high")]
    for load in sweep.work.keys.values():  # type: ignore[union-attr]
        for level in LEVELS:
            # the spec of a scripted key is its name after the kind's prefix
            expected = sum(
                n for (spec, lv), n in load_calls.items() if lv == level and spec in load.key
            )
            assert load.calls[level] == expected
    for level in LEVELS:
        total = sum(seconds[level] for _, seconds in sweep.work.serial.values())  # type: ignore[union-attr]
        assert total == pytest.approx(serial[level], rel=1e-12)
    (judging,) = estimate_judging(sweep)
    judge_calls["high"] *= 1 + DEFAULT_MAX_RETRIES  # every judge call at its most attempts
    assert {k: judging.calls[k] for k in LEVELS} == {k: judge_calls[k] for k in LEVELS}
    planned = Counter(
        {
            (key, condition, scenario): n
            for key, c in sweep.contrasts.items()
            for (condition, scenario), n in c.pairs.items()
        }
    )
    assert planned == pairs and sum(pairs.values()) > 0


def _huge(tmp_path: Path, replicates: int, targets: int) -> Path:
    specs = ", ".join(f"scripted:t{i}" for i in range(targets))
    path = tmp_path / "huge.yaml"
    path.write_text(
        f"scenarios:\n  paths: [{TEEN}]\ntargets: [{specs}]\nconditions: [none, teen_aware]\n"
        f"simulators: [scripted:p]\nreplicates: {replicates}\nmax_exchanges: 200\n"
    )
    return path


def test_a_sweep_of_more_cells_than_the_plan_allows_is_refused_with_one_line(
    tmp_path: Path,
) -> None:
    path = _huge(tmp_path, 1000, 2)  # 198 variants x 2 x 2 x 1000 = 792,000 cells
    with pytest.raises(UserError) as err:
        plan_sweep(load_manifest(path), path, "s")
    (line,) = str(err.value).splitlines()
    assert line.startswith(f"{path}:6:13: replicates: ")
    assert "replicates: 198 variants x 2 targets x 2 conditions x 1 simulators x 1000" in line
    assert f"792,000 cells (expected at most {MAX_CELLS:,}" in line


def test_the_cell_limit_refuses_on_the_command_line_with_exit_2(tmp_path: Path) -> None:
    path = _huge(tmp_path, 1000, 2)
    done = subprocess.run(
        [sys.executable, "-m", "branchpoint.tui.cli", "sweep", str(path), "--plan"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "792,000 cells" in line


@pytest.mark.slow
def test_the_largest_sweep_within_the_limit_is_planned(tmp_path: Path) -> None:
    # 198 variants x 1 target x 2 conditions x 500 replicates = 198,000 cells: at the limit
    path = _huge(tmp_path, 500, 1)
    sweep = plan_sweep(load_manifest(path), path, "s")
    assert sweep.cells == 198_000 <= MAX_CELLS
    assert sweep.targets[0].calls["low"] > 0
