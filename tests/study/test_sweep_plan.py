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

from branchpoint.core.errors import UserError
from branchpoint.core.read import model_call_count
from branchpoint.core.store import open_store
from branchpoint.simulator.call_tally import schedules, tree_calls
from branchpoint.study.manifest import Manifest, load_manifest
from branchpoint.study.plan import plan_sweep
from branchpoint.study.run import run_sweep

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "sweep"
MANIFEST = SWEEP / "teen_scripted.yaml"


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.syspath_prepend(str(SWEEP))
    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "sweep_plugin")
    import sweep_plugin

    return sweep_plugin


def _target_calls(store: object, spec: str) -> int:
    from sqlalchemy import func, select

    from branchpoint.core.read.schema import MODEL_CALLS

    m = MODEL_CALLS.c
    q = select(func.count()).where(m.purpose == "target", m.model == spec)
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        return int(conn.execute(q).scalar_one())


@pytest.mark.parametrize("fork", ["shared", "independent"])
@pytest.mark.slow
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
    # Independent arms never fork, so every schedule gives the same count: the no-fork one
    # (high adds every persona turn's retries).
    quiet_high = quiet.calls["high"] - quiet.persona_retries["high"]
    if fork == "independent":
        assert quiet.calls["low"] == quiet_high == quiet.calls_independent
    else:
        assert quiet.calls["low"] < quiet.calls["expected"] < quiet_high
        assert quiet_high < quiet.calls_independent
    made = result.calls["persona"] + result.calls["target"]
    # high counts every persona turn at its most attempts; this persona never breaks character
    eager_high = eager.calls["high"] - eager.persona_retries["high"]
    assert made == quiet.calls["low"] + eager_high + sum(midway.values())
    assert model_call_count(store, "persona") == result.calls["persona"]
    for spec, level in (("scripted:quiet", "low"), ("scripted:eager", "high")):
        persona = tree_persona_calls(plan, spec, level) + by_target[spec].persona_retries[level]
        assert _target_calls(store, spec) == by_target[spec].calls[level] - persona
    assert _target_calls(store, "scripted:midway") == midway["target"]
    store.close()


def test_high_counts_every_persona_turn_at_its_most_attempts(
    tmp_path: Path, plugin: object
) -> None:
    # A persona that breaks character on every turn's first attempt made twice the persona calls
    # the plan's high counted (it counted none of the retries): high was not an upper bound.
    manifest, path = _manifest(
        tmp_path,
        targets=["scripted:eager"],
        simulators=["scripted:flaky-persona"],
        max_exchanges=3,
    )
    store = open_store(tmp_path / "sweep.db")
    plan = plan_sweep(manifest, path, "flaky", store=store)
    est = plan.targets[0]
    result = asyncio.run(run_sweep(plan, store))
    assert result.completed == plan.cells
    persona, target = model_call_count(store, "persona"), model_call_count(store, "target")
    turns = persona // 2  # each turn: a broken first attempt, then the retry
    assert persona == 2 * turns and target == est.calls["high"] - 3 * turns
    retries = plan.persona_retries
    assert est.persona_retries["high"] == retries * turns  # every turn at its most attempts
    assert est.calls["low"] <= persona + target <= est.calls["high"]
    assert persona + target > est.calls["high"] - est.persona_retries["high"]  # beyond the old high
    assert "every persona turn takes its 2 retries" in plan.lines()[1]
    store.close()


def test_low_is_a_floor_when_every_reply_is_one_word(tmp_path: Path, plugin: object) -> None:
    # low assumed typical short messages (10 and 40 tokens), so one-word replies spent less
    # than the plan's low (issue 33: $0.0024 spent, $0.0052 low). It now counts a token for
    # each non-empty message a call sends, which no reply can take away.
    price = {"input_per_mtok": 1000, "output_per_mtok": 2000}
    manifest, path = _manifest(
        tmp_path,
        targets=[{"spec": "scripted:terse", "price": price}],
        simulators=[{"spec": "scripted:terse-persona", "price": price}],
        max_exchanges=4,
    )
    store = open_store(tmp_path / "sweep.db")
    plan = plan_sweep(manifest, path, "terse", store=store)
    asyncio.run(run_sweep(plan, store))
    with store.engine.connect() as conn:
        from sqlalchemy import text

        spent = conn.execute(text("select sum(cost) from model_calls")).scalar_one()
    low, high = plan.total("usd", "low"), plan.total("usd", "high")
    assert low is not None and high is not None
    assert 0 < low <= spent <= high, (low, spent, high)
    store.close()


def tree_persona_calls(plan: object, spec: str, level: str) -> int:
    from branchpoint.study.plan import SCHEDULE_OF

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


@pytest.mark.slow
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


def _target_and_persona_calls(plan: object, level: str) -> tuple[int, int]:
    """(target, persona) calls of the plan's trees at ``level``, counted tree by tree."""
    from branchpoint.study.plan import SCHEDULE_OF

    target = persona = 0
    for _, run_plan in plan.runs:  # type: ignore[attr-defined]
        for tree in run_plan.trees:
            tally = tree_calls(tree, schedules(tree)[SCHEDULE_OF[level]])
            target += tally.target_calls
            persona += tally.persona_calls
    return target, persona


def test_wall_time_is_bound_by_requests_per_minute(tmp_path: Path) -> None:
    manifest, path = _manifest(
        tmp_path,
        targets=[{"spec": "litellm:openai/gpt-4o-mini", "limits": {"rpm": 30}}],
        simulators=["scripted:p"],  # no latency: only the target's limits bind
        replicates=4,
    )
    plan = plan_sweep(manifest, path, "s")
    assert plan.wall is not None
    for level in ("low", "expected", "high"):
        target, _ = _target_and_persona_calls(plan, level)
        # 30 requests a minute: two seconds a call, whatever the latency
        assert plan.wall.seconds[level] == pytest.approx(target * 60 / 30)
        assert plan.wall.bound_by[level] == "litellm:openai requests/min"
    assert any(line.startswith("wall time: ") for line in plan.lines())
    # The same sweep with no rpm set is faster: 16 in flight at 3 s a call.
    free = Manifest.model_validate(
        {**manifest.model_dump(), "targets": ["litellm:openai/gpt-4o-mini"]}
    )
    unbound = plan_sweep(free, path, "s").wall
    assert unbound is not None and unbound.seconds["expected"] < plan.wall.seconds["expected"]


def test_wall_time_is_bound_by_calls_in_flight_and_latency(tmp_path: Path) -> None:
    from branchpoint.study.timing import API_LATENCY_S

    manifest, path = _manifest(
        tmp_path,
        targets=[{"spec": "litellm:openai/gpt-4o-mini", "limits": {"in_flight": 2}}],
        simulators=["scripted:p"],
        replicates=4,
    )
    plan = plan_sweep(manifest, path, "s")
    assert plan.wall is not None
    for i, level in enumerate(("low", "expected", "high")):
        target, _ = _target_and_persona_calls(plan, level)
        assert plan.wall.seconds[level] == pytest.approx(target * API_LATENCY_S[i] / 2)
        assert plan.wall.bound_by[level] == "litellm:openai in flight"


def test_wall_time_counts_a_conversations_calls_as_serial(tmp_path: Path) -> None:
    from branchpoint.study.timing import API_LATENCY_S

    # One group in flight, persona and target on different providers: each provider alone
    # could finish in its own calls x latency, but a conversation waits for both in turn.
    manifest, path = _manifest(
        tmp_path,
        targets=[{"spec": "oai:m", "params": {"api_base": "http://127.0.0.1:9/v1"}}],
        simulators=["litellm:openai/gpt-4o"],
        execution={"concurrency": 1},
    )
    plan = plan_sweep(manifest, path, "s")
    assert plan.wall is not None
    target, persona = _target_and_persona_calls(plan, "expected")
    assert persona > 0
    assert plan.wall.seconds["expected"] == pytest.approx((target + persona) * API_LATENCY_S[1])
    assert plan.wall.bound_by["expected"] == "1 conversation groups in flight"


def test_wall_time_adds_the_judges_after_and_shares_limits_with_live_ones(
    tmp_path: Path,
) -> None:
    from branchpoint.study.judge_estimate import estimate_judging
    from branchpoint.study.timing import API_LATENCY_S

    oai = {"api_base": "http://127.0.0.1:9/v1"}
    manifest, path = _manifest(
        tmp_path,
        targets=[{"spec": "oai:m", "params": oai, "limits": {"in_flight": 2}}],
        simulators=["scripted:p"],
        replicates=4,
    )
    judge = {"spec": "litellm:openai/gpt-4o-mini", "rubrics": ["teen"]}
    # after: the judging pass starts once every conversation is done, 16 calls in flight
    plan = plan_sweep(
        Manifest.model_validate({**manifest.model_dump(), "judges": [judge]}), path, "s"
    )
    assert plan.wall is not None
    conversations = dict(plan.wall.seconds)
    (est,) = estimate_judging(plan)
    plan.attach_judging([est])
    for i, level in enumerate(("low", "expected", "high")):
        judging = est.calls[level] * API_LATENCY_S[i] / 16
        assert plan.wall.seconds[level] == pytest.approx(conversations[level] + judging)
        assert plan.wall.bound_by[level] == (
            "oai:http://127.0.0.1:9/v1 in flight, then judging by litellm:openai in flight"
        )
    assert "litellm" in plan.kinds  # its latency is among those the plan says it assumed
    # live, on the target's own server: its calls queue at the same 2 in flight
    live = {**judge, "spec": "oai:judge", "params": oai, "when": "live"}
    plan = plan_sweep(
        Manifest.model_validate({**manifest.model_dump(), "judges": [live]}), path, "s"
    )
    (est,) = estimate_judging(plan)
    plan.attach_judging([est])
    assert plan.wall is not None
    for i, level in enumerate(("low", "expected", "high")):
        target, _ = _target_and_persona_calls(plan, level)
        both = (target + est.calls[level]) * API_LATENCY_S[i] / 2
        assert plan.wall.seconds[level] == pytest.approx(both)
        assert plan.wall.bound_by[level] == "oai:http://127.0.0.1:9/v1 in flight"
    assert est.calls["expected"] > 0


def _factorial_scenario(tmp_path: Path) -> Path:
    source = (SWEEP.parents[1] / "fixtures" / "engine" / "on_event.yaml").read_text("utf-8")
    folder = tmp_path / "scenarios"
    folder.mkdir()
    for i in range(3):
        text = source.replace("id: eng-on-event", f"id: eng-factorial-{i}")
        (folder / f"s{i}.yaml").write_text(text + "design: factorial\n", encoding="utf-8")
    return folder


def test_detectable_difference_counts_matched_pairs_per_scenario(tmp_path: Path) -> None:
    from branchpoint.core.power import paired_cluster_mdd

    path = tmp_path / "m.yaml"
    path.write_text("x: 1\n", encoding="utf-8")
    manifest = Manifest.model_validate(
        {
            "scenarios": {"paths": [str(_factorial_scenario(tmp_path))]},
            "targets": ["scripted:a", "scripted:b"],
            "conditions": ["none", "teen_aware"],
            "simulators": ["scripted:p"],
            "replicates": 3,
            "plan": {"base_rate": 0.1},
        }
    )
    plan = plan_sweep(manifest, path, "s")
    assert set(plan.contrasts) == {
        ("help", "accept", "decline"),
        ("limit", "accept_limit", "push_back"),
    }
    help_ = plan.contrasts[("help", "accept", "decline")]
    # factorial: 4 arms a tree, so 2 help pairs (one for each limit option) in each of
    # 2 targets x 3 replicates, per scenario and condition; conditions are never pooled
    assert help_.sizes() == {"none": [12, 12, 12], "teen_aware": [12, 12, 12]}
    mdd = paired_cluster_mdd(0.1, [12, 12, 12])
    per_target = paired_cluster_mdd(0.1, [6, 6, 6])
    assert mdd is not None and per_target is not None and mdd < per_target
    row = next(line for line in plan.lines() if "help: accept → decline" in line)
    # 3 scenarios: the analysis runs the exact sign-flip test, whose smallest p is 2 / 8: the
    # t-test's MDD (which the plan printed before issue 44) is not what the analysis can detect
    assert row.split()[:6] == ["help:", "accept", "→", "decline", "3", "36"]
    assert row.count("no effect detectable with 3 scenarios: the smallest possible p is 0.25") == 2
    assert "points" not in row
    text = "\n".join(plan.lines())
    assert "base rate 10%" in text and "80% power" in text and "no within-pair" in text


def test_detectable_difference_has_80_percent_power_by_simulation() -> None:
    """Outcomes drawn at p and p + MDD, tested as analysis does (t over scenario means)."""
    import numpy as np
    from scipy import stats

    from branchpoint.core.power import paired_cluster_mdd

    rng = np.random.default_rng(11)
    sims = 400
    for base, scenarios, pairs in ((0.2, 12, 6), (0.1, 30, 4), (0.3, 6, 20)):
        mdd = paired_cluster_mdd(base, [pairs] * scenarios)
        assert mdd is not None
        a = rng.random((sims, scenarios, pairs)) < base
        b = rng.random((sims, scenarios, pairs)) < base + mdd
        means = (b.astype(float) - a).mean(axis=2)  # each scenario's mean paired difference
        power = float((stats.ttest_1samp(means, 0.0, axis=1).pvalue < 0.05).mean())
        assert 0.70 <= power <= 0.90, (base, scenarios, pairs, mdd, power)
        # half the difference is detected far less often: the figure is not just any delta
        b = rng.random((sims, scenarios, pairs)) < base + mdd / 2
        means = (b.astype(float) - a).mean(axis=2)
        assert float((stats.ttest_1samp(means, 0.0, axis=1).pvalue < 0.05).mean()) < 0.5
    assert paired_cluster_mdd(0.2, [50]) is None  # one scenario: no scenario-level test


ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "teen-study.yaml"


def _sweeps_page_blocks(fence: str) -> list[str]:
    """The code blocks opened by ```FENCE in the docs' sweeps guide."""
    text = (ROOT / "docs" / "guides" / "sweeps.md").read_text(encoding="utf-8")
    parts = text.split(f"```{fence}\n")[1:]
    return [p.split("```", 1)[0] for p in parts]


def test_docs_example_manifest_is_the_example_file_and_its_plan_is_as_printed() -> None:
    """The sweeps guide's manifest is examples/teen-study.yaml, it loads, and its --plan output in
    the guide is what the plan prints (after changing the plan, paste
    `branchpoint sweep examples/teen-study.yaml --plan` into docs/guides/sweeps.md)."""
    assert _sweeps_page_blocks("yaml")[0] == EXAMPLE.read_text(encoding="utf-8")
    manifest = load_manifest(EXAMPLE)
    plan = plan_sweep(manifest, EXAMPLE, "teen-study")
    from branchpoint.study.judge_estimate import estimate_judging

    plan.attach_judging(estimate_judging(plan))  # as `sweep` attaches it
    printed = next(b for b in _sweeps_page_blocks("") if b.startswith("sweep teen-study:"))
    assert printed.splitlines() == plan.lines(), "paste the new --plan output into the guide"


def test_an_unpriced_judge_with_a_budget_is_an_error_and_a_judge_price_counts(
    tmp_path: Path,
) -> None:
    manifest, path = _manifest(tmp_path, targets=["litellm:openai/gpt-4o"])
    judged = {
        **manifest.model_dump(),
        "budget": {"usd_total": 5},
        "judges": [{"spec": "litellm:openai/not-a-real-judge-xyz", "rubrics": ["teen"]}],
    }
    with pytest.raises(UserError, match=r"judges\[0\]\.price: 'litellm:openai/not-a-real-judge"):
        plan_sweep(Manifest.model_validate(judged), path, "s")
    judged["judges"][0]["price"] = {"input_per_mtok": 3.0, "output_per_mtok": 6.0}
    plan = plan_sweep(Manifest.model_validate(judged), path, "s")
    assert plan.unpriced == []
    from branchpoint.study.run import sweep_prices

    price = sweep_prices(plan)["litellm:openai/not-a-real-judge-xyz"]
    assert (price.input, price.output) == pytest.approx((3e-6, 6e-6))


def test_low_expected_high_are_ordered_when_max_tokens_is_below_a_typical_reply(
    tmp_path: Path,
) -> None:
    # max_tokens 30 is below the typical reply (150 tokens) the expected level assumed: expected
    # came out above high ($0.04 / 0.37 / 0.27 in issue 33); a reply is capped by max_tokens.
    manifest, path = _manifest(
        tmp_path,
        targets=[{"spec": "litellm:openai/gpt-4o-mini", "params": {"max_tokens": 30}}],
        simulators=["scripted:persona"],
    )
    plan = plan_sweep(manifest, path, "s")
    for t in plan.targets:
        tok = [t.tokens[k].output for k in ("low", "expected", "high")]
        usd = [t.usd[k] for k in ("low", "expected", "high")]
        assert tok[0] <= tok[1] <= tok[2], tok
        assert None not in usd and usd[0] <= usd[1] <= usd[2], usd  # type: ignore[operator]
    low, expected, high = (plan.total("usd", k) for k in ("low", "expected", "high"))
    assert low is not None and expected is not None and high is not None
    assert low <= expected <= high


def test_a_target_without_max_tokens_has_its_high_called_an_assumption(tmp_path: Path) -> None:
    # high took 600-token replies for a target with no max_tokens and the question before a
    # sweep said "may cost up to" that figure: a target's reply has no such limit.
    from branchpoint.study.confirm import cost_check

    price = {"input_per_mtok": 500, "output_per_mtok": 2000}
    capped = {"spec": "oai:capped", "params": {"max_tokens": 50}, "price": price}
    manifest, path = _manifest(
        tmp_path, targets=[capped, {"spec": "oai:open", "price": price}], simulators=["scripted:p"]
    )
    plan = plan_sweep(manifest, path, "s")
    assert plan.uncapped == ["oai:open"]
    (line,) = (ln for ln in plan.lines() if ln.startswith("high is not a bound"))
    assert line.startswith("high is not a bound for oai:open: no max_tokens, so its replies")
    reason = cost_check(plan).reason()
    assert "may cost up to" in reason and "more if oai:open replies past 600 tokens" in reason
    only_capped = Manifest.model_validate({**manifest.model_dump(), "targets": [capped]})
    plan = plan_sweep(only_capped, path, "s")
    assert plan.uncapped == [] and "more if" not in cost_check(plan).reason()
    assert not any(ln.startswith("high is not a bound") for ln in plan.lines())


def test_a_sweep_whose_arms_never_fork_is_not_said_to_fork(tmp_path: Path) -> None:
    # fork: independent printed "... with forking, N without": no arm of it forks.
    manifest, path = _manifest(
        tmp_path, targets=["scripted:t"], simulators=["scripted:p"], fork="independent"
    )
    (line,) = (ln for ln in plan_sweep(manifest, path, "s").lines() if ln.startswith("model calls"))
    assert "forking" not in line and line.endswith("every arm from scratch (fork: independent)")
    shared = plan_sweep(manifest.model_copy(update={"fork": "shared"}), path, "s")
    (line,) = (ln for ln in shared.lines() if ln.startswith("model calls"))
    assert line.endswith(" without") and "with forking" in line


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
