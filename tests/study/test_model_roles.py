"""Prices, limits and keys for every model role (issue 33, Build 5): simulators, the detector and
the judges take a target's ``{spec, params, price, limits, key_env}`` form (a bare spec stays
valid); a price counts toward the plan and the budget and is recorded, budget or not; limits
hold for the role's calls; a key is read from its ``key_env`` at run time and never stored."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_sweep_cli import SCENARIO, cli
from typer.testing import CliRunner

from branchpoint.core.errors import UserError
from branchpoint.gateway.limits import ProviderLimits
from branchpoint.gateway.pricing import price_of
from branchpoint.gateway.testing.openai_server import ServerThread, bill_usd
from branchpoint.study.manifest import ManifestError, load_manifest
from branchpoint.study.plan import plan_sweep, sweep_limits

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BAD = FIXTURES / "bad_manifests"
LEVELS = ("low", "expected", "high")
# USD per million tokens (input, output) of each role's loopback model
PRICES = {
    "loop-target": (3.0, 15.0),
    "loop-persona": (1.0, 4.0),
    "loop-detector": (0.5, 2.0),
}


def _price(name: str) -> dict[str, float]:
    return {"input_per_mtok": PRICES[name][0], "output_per_mtok": PRICES[name][1]}


def _write(path: Path, body: dict[str, Any]) -> Path:
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def _base(**extra: Any) -> dict[str, Any]:
    return {
        "scenarios": {"paths": [str(SCENARIO)]},
        "targets": ["scripted:quiet"],
        "max_exchanges": 3,
        **extra,
    }


def test_every_role_takes_the_target_form_and_a_bare_spec_stays_valid(tmp_path: Path) -> None:
    from branchpoint.study.manifest import ModelEntry

    body = _base(
        simulators=[
            "scripted:persona-a",
            {
                "spec": "oai:persona-b",
                "params": {"api_base": "http://127.0.0.1:9/v1", "temperature": 0.9},
                "key_env": "PERSONA_KEY",
                "limits": {"in_flight": 2, "rpm": 30},
                "price": {"input_per_mtok": 0.2, "output_per_mtok": 0.8},
            },
        ],
        detector="scripted:detector",
        judges=[
            {
                "spec": "litellm:openai/gpt-4o-mini",
                "rubrics": ["teen"],
                "key_env": "JUDGE_KEY",
                "limits": {"tpm": 10000},
                "price": {"input_per_mtok": 0.15, "output_per_mtok": 0.6},
            },
            {"spec": "heuristic", "rubrics": ["teen"]},
        ],
    )
    m = load_manifest(_write(tmp_path / "m.yaml", body))
    a, b = m.simulators
    assert isinstance(a, ModelEntry) and a.spec == "scripted:persona-a" and a.price is None
    assert b.key_env == "PERSONA_KEY" and b.limits.in_flight == 2 and b.price is not None
    assert m.detector is not None and m.detector.spec == "scripted:detector"
    assert m.judges[0].key_env == "JUDGE_KEY" and m.judges[0].limits.tpm == 10000
    # one entry type for every role: a judge's is a target's with rubrics
    assert {type(m.targets[0]).__mro__[1], type(m.judges[0]).__mro__[1]} == {ModelEntry}


def test_the_key_env_names_of_every_role_with_where_they_are_written(tmp_path: Path) -> None:
    from branchpoint.study.manifest import RoleKey, role_key_envs

    body = _base(
        targets=[{"spec": "scripted:quiet", "key_env": "TARGET_KEY"}, "scripted:eager"],
        simulators=["scripted:sweep-persona", {"spec": "scripted:p2", "key_env": "SIM_KEY"}],
        detector={"spec": "scripted:det", "key_env": "DET_KEY"},
        judges=[
            {"spec": "heuristic", "rubrics": ["teen"]},
            {"spec": "scripted:judge", "rubrics": ["teen"], "key_env": "TARGET_KEY"},
        ],
    )
    m = load_manifest(_write(tmp_path / "m.yaml", body))
    assert role_key_envs(m) == [
        RoleKey("targets[0]", "TARGET_KEY"),
        RoleKey("simulators[1]", "SIM_KEY"),
        RoleKey("detector", "DET_KEY"),
        RoleKey("judges[1]", "TARGET_KEY"),
    ]


# a role entry's malformed forms, one positioned line each as a target's (their text is in
# test_sweep_manifest's EXPECTED, with every bad manifest's)
MALFORMED = [
    "simulator_unknown_field.yaml",
    "simulator_price_no_spec.yaml",
    "simulator_key_in_manifest.yaml",
]


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_role_entry_is_one_positioned_line_and_exit_2(name: str) -> None:
    from test_sweep_manifest import EXPECTED

    from branchpoint.tui.cli import app

    path = BAD / name
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert [str(e) for e in info.value.errors] == [f"{path}:{EXPECTED[name]}"]
    result = CliRunner().invoke(app, ["sweep", "--plan", str(path)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert result.output.strip().splitlines() == [f"{path}:{EXPECTED[name]}"]


def test_a_key_written_as_key_env_of_a_detector_or_judge_is_refused(tmp_path: Path) -> None:
    body = _base(
        detector={"spec": "scripted:det", "key_env": "sk-live-0123456789"},
        judges=[{"spec": "scripted:j", "rubrics": ["teen"], "params": {"token": "abc"}}],
    )
    path = _write(tmp_path / "m.yaml", body)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert [e.field for e in info.value.errors] == ["detector.key_env", "judges[0].params.token"]


def test_a_heuristic_judge_takes_no_price(tmp_path: Path) -> None:
    body = _base(
        judges=[{"spec": "heuristic", "rubrics": ["teen"], "price": _price("loop-target")}]
    )
    with pytest.raises(ManifestError, match=r"judges\[0\]\.price: the heuristic judge calls no"):
        load_manifest(_write(tmp_path / "m.yaml", body))


def test_a_budget_with_a_priced_simulator_plans_and_its_price_counts(tmp_path: Path) -> None:
    persona = {"spec": "oai:loop-persona", "params": {"api_base": "http://127.0.0.1:9/v1"}}
    body = _base(simulators=[persona], budget={"usd_total": 5})
    path = _write(tmp_path / "m.yaml", body)
    with pytest.raises(UserError) as info:  # unpriced: refused at the simulator's price
        plan_sweep(load_manifest(path), path, "s")
    assert re.fullmatch(
        rf"{re.escape(str(path))}:1:\d+: simulators\[0\]\.price: 'oai:loop-persona' has no "
        r"price in litellm's price map and a budget is set .*",
        str(info.value),
    ), info.value
    _write(path, {**body, "simulators": [{**persona, "price": _price("loop-persona")}]})
    plan = plan_sweep(load_manifest(path), path, "s")
    assert plan.unpriced == [] and plan.targets[0].target == "scripted:quiet"
    # the persona's tokens at its price are the plan's dollars (the scripted target is free)
    usd = plan.targets[0].usd["expected"]
    tokens = plan.targets[0].tokens["expected"]
    assert usd is not None and 0 < usd < tokens.usd(price_of("x", PRICES["loop-persona"]))


def test_two_prices_for_one_model_are_refused(tmp_path: Path) -> None:
    spec = "oai:loop-persona"
    api = {"api_base": "http://127.0.0.1:9/v1"}
    body = _base(
        targets=[{"spec": spec, "params": api, "price": _price("loop-persona")}],
        simulators=[{"spec": spec, "params": api, "price": _price("loop-target")}],
    )
    path = _write(tmp_path / "m.yaml", body)
    with pytest.raises(UserError, match=r"simulators\[0\]\.price: 'oai:loop-persona' is priced "):
        plan_sweep(load_manifest(path), path, "s")


def test_the_limits_of_every_role_are_the_sweeps_gateways_limits(tmp_path: Path) -> None:
    from branchpoint.core.store import open_store
    from branchpoint.gateway import event_loop
    from branchpoint.gateway.specs import params_from, parse_spec
    from branchpoint.study.run import sweep_gateway

    api = {"api_base": "http://127.0.0.1:9/v1"}
    body = _base(
        simulators=[{"spec": "oai:persona", "params": api, "limits": {"in_flight": 2, "rpm": 30}}],
        detector={"spec": "oai:detector", "params": api, "limits": {"tpm": 5000}},
        judges=[
            {"spec": "oai:judge", "params": api, "rubrics": ["teen"], "limits": {"in_flight": 3}}
        ],
        execution={"concurrency": 7},
    )
    path = _write(tmp_path / "m.yaml", body)
    plan = plan_sweep(load_manifest(path), path, "s")
    assert sweep_limits(plan.runs) == {
        "oai:persona": ProviderLimits(max_concurrency=2, rpm=30),
        "oai:detector": ProviderLimits(max_concurrency=7, tpm=5000),
        "oai:judge": ProviderLimits(max_concurrency=3),
    }
    store = open_store(str(tmp_path / "r.db"))
    gateway = sweep_gateway(plan, store, write_behind=False)
    try:
        spec = parse_spec("oai:persona")
        limiter = gateway._limiter(spec, params_from(api), gateway.provider_for(spec))
        assert limiter.snapshot().configured == 2
    finally:
        event_loop.run(gateway.aclose())
        store.close()


def test_simulators_with_their_own_params_get_their_own_run_config(tmp_path: Path) -> None:
    body = _base(
        simulators=[
            "scripted:sweep-persona",
            {"spec": "scripted:p2", "params": {"temperature": 0.1}},
        ],
        simulator_params={"temperature": 0.9, "max_tokens": 50},
    )
    path = _write(tmp_path / "m.yaml", body)
    plan = plan_sweep(load_manifest(path), path, "s")
    got = {tuple(c.simulators): c.simulator_params for c, _ in plan.runs}
    assert got == {
        ("scripted:sweep-persona",): {"temperature": 0.9, "max_tokens": 50},
        ("scripted:p2",): {"temperature": 0.1, "max_tokens": 50},
    }
    # every cell once, each simulator's trees planned with its own persona params
    ids = [a.conversation_id for _, p in plan.runs for t in p.trees for a in t.arms]
    assert len(ids) == len(set(ids)) == plan.cells
    temps = {t.simulator: p.persona_params.temperature for _, p in plan.runs for t in p.trees}
    assert temps == {"scripted:sweep-persona": 0.9, "scripted:p2": 0.1}


def test_a_sweep_stored_with_bare_simulators_continues_under_the_entry_form(
    tmp_path: Path,
) -> None:
    from branchpoint.study.identity import check_compatible, identity_record

    body = _base(simulators=["scripted:sweep-persona"], detector="scripted:det")
    path = _write(tmp_path / "m.yaml", body)
    m = load_manifest(path)
    record = identity_record(m, path, {})
    # as a sweep begun before simulators took entries stored it
    record["manifest"]["simulators"] = ["scripted:sweep-persona"]
    record["manifest"]["detector"] = {"spec": "scripted:det", "params": {}}
    # a price and limits decide nothing about a cell
    priced = {"spec": "scripted:sweep-persona", "price": _price("loop-persona")}
    _write(path, {**body, "simulators": [{**priced, "limits": {"rpm": 10}}]})
    check_compatible(record, load_manifest(path), "s", str(path), {})
    # its params or key do
    _write(path, {**body, "simulators": [{**priced, "params": {"temperature": 0.2}}]})
    with pytest.raises(UserError, match=r": simulators: changed since sweep s began"):
        check_compatible(record, load_manifest(path), "s", str(path), {})


@pytest.mark.slow
def test_a_simulators_key_comes_from_key_env_and_never_reaches_the_store(tmp_path: Path) -> None:
    secret = "sk-test-persona-0123456789SECRET"
    body = {
        "scenarios": {"paths": [str(SCENARIO)]},
        "targets": ["scripted:quiet"],
        "simulators": [{"spec": "scripted:sweep-persona", "key_env": "STUDY_PERSONA_KEY"}],
        "max_exchanges": 3,
        "store": "results.db",
    }
    manifest = _write(tmp_path / "study.yaml", body)
    os.environ.pop("STUDY_PERSONA_KEY", None)
    unset = cli("sweep", str(manifest))
    assert unset.returncode == 2
    assert re.fullmatch(  # positioned at the key_env the manifest names
        rf"error: {re.escape(str(manifest))}:\d+:\d+: simulators\[0\]\.key_env: "
        r"\$STUDY_PERSONA_KEY is not set \(expected the simulator's API key in it\)",
        unset.stderr.strip().splitlines()[-1],
    )
    os.environ["STUDY_PERSONA_KEY"] = secret
    try:
        res = cli("sweep", str(manifest))
        listed = cli("runs", "--db", str(tmp_path / "results.db"))
    finally:
        del os.environ["STUDY_PERSONA_KEY"]
    assert res.returncode == 0, res.stderr
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("results.db*"))
    assert b"STUDY_PERSONA_KEY" in stored  # the variable's name is part of the manifest
    assert secret.encode() not in stored
    assert secret not in res.stdout + res.stderr + listed.stdout + listed.stderr


def _runs_usd(db: Path, sweep_id: str) -> float:
    listed = cli("runs", "--db", str(db))
    assert listed.returncode == 0, listed.stderr
    header = next(ln for ln in listed.stdout.splitlines() if " USD " in ln).split()
    row = next(ln for ln in listed.stdout.splitlines() if ln.split()[:1] == [sweep_id]).split()
    return float(row[header.index("USD")])


@pytest.mark.slow
def test_prices_without_a_budget_are_recorded_and_within_the_plan(tmp_path: Path) -> None:
    """No budget: each role's price still prices its calls. What ``runs`` shows equals the
    server's token counts at the prices, and the plan's high bounds it."""
    from branchpoint.study.api import plan_study

    server = ServerThread()
    url = server.start()
    try:
        assert server.server is not None

        def role(name: str, max_tokens: int) -> dict[str, Any]:
            params = {"api_base": url, "max_tokens": max_tokens}
            return {"spec": f"oai:{name}", "params": params, "price": _price(name)}

        body = {
            "scenarios": {"paths": [str(SCENARIO)]},
            "targets": [role("loop-target", 60)],
            "simulators": [role("loop-persona", 40)],
            "detector": role("loop-detector", 30),
            "max_exchanges": 3,
            "store": "results.db",
        }
        manifest = _write(tmp_path / "study.yaml", body)
        plan = plan_study(manifest, with_keys=False).sweep
        res = cli("sweep", str(manifest), "--yes")
        billed = dict(server.server.billed)
    finally:
        server.stop()
    assert res.returncode == 0, res.stdout + res.stderr
    assert set(billed) == set(PRICES)  # every role called its own model
    usd = sum(bill_usd({name: b}, *PRICES[name]) for name, b in billed.items())
    assert usd > 0
    db = tmp_path / "results.db"
    with sqlite3.connect(db) as con:
        (recorded,) = con.execute("select sum(cost) from model_calls").fetchone()
    assert recorded == pytest.approx(usd, rel=1e-9)
    assert _runs_usd(db, "sweep-study") == pytest.approx(usd, abs=5e-5)  # shown to 4 places
    # The plan's dollars hold every role's price: low and high bound what the server billed.
    # (low assumed typical reply lengths, so the echo server's 15-token replies spent less
    # than it: $0.0024 against $0.0052; it is now a floor.)
    low, high = plan.total("usd", "low"), plan.total("usd", "high")
    assert low is not None and high is not None and low <= usd <= high, (low, usd, high)
    unpriced_roles = {**body, "simulators": ["oai:x"], "detector": "oai:y"}
    without = plan_study(_write(tmp_path / "target-only.yaml", unpriced_roles), with_keys=False)
    assert without.sweep.total("usd", "high") is None  # the roles' prices are what priced them
    assert plan.targets[0].usd["high"] == high  # no judge: the trees' figure is the total


@pytest.mark.slow
def test_a_targets_price_is_recorded_without_a_budget(tmp_path: Path) -> None:
    """The manifest form of before this change: a priced target, no budget. `runs` showed
    USD 0.0000; it shows the server's tokens at the price."""
    server = ServerThread()
    url = server.start()
    try:
        assert server.server is not None
        params = {"api_base": url, "max_tokens": 60}
        body = {
            "scenarios": {"paths": [str(SCENARIO)]},
            "targets": [
                {"spec": "oai:loop-target", "params": params, "price": _price("loop-target")}
            ],
            "simulators": ["scripted:sweep-persona"],
            "max_exchanges": 3,
            "store": "results.db",
        }
        res = cli("sweep", str(_write(tmp_path / "study.yaml", body)), "--yes")
        billed = dict(server.server.billed)
    finally:
        server.stop()
    assert res.returncode == 0, res.stdout + res.stderr
    usd = bill_usd(billed, *PRICES["loop-target"])
    assert usd > 0
    assert _runs_usd(tmp_path / "results.db", "sweep-study") == pytest.approx(usd, abs=5e-5)


def test_the_sweep_schema_takes_every_role_in_both_forms() -> None:
    import jsonschema

    from branchpoint.study import manifest_json_schema

    schema = manifest_json_schema()
    entry = {
        "spec": "oai:persona",
        "params": {"api_base": "http://127.0.0.1:9/v1"},
        "key_env": "PERSONA_KEY",
        "limits": {"in_flight": 2},
        "price": _price("loop-persona"),
    }
    judge = {**entry, "spec": "oai:judge", "rubrics": ["teen"]}
    good = _base(simulators=["embedded", entry], detector=entry, judges=[judge])
    jsonschema.validate(good, schema)
    jsonschema.validate(_base(detector="scripted:det"), schema)
    for bad in (
        _base(simulators=[{**entry, "prise": 1}]),
        _base(simulators=[{"price": _price("loop-persona")}]),
        _base(detector={**entry, "key_env": "sk-0123"}),
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_a_judges_verdicts_are_capped_by_its_max_tokens_in_the_plan(tmp_path: Path) -> None:
    """A judge with ``max_tokens`` below a typical verdict: its expected dollars were above its
    high (the high took the cap, the expected a typical verdict past it)."""
    from branchpoint.study.judge_estimate import estimate_judging

    judge = {
        "spec": "oai:loop-judge",
        "params": {"api_base": "http://127.0.0.1:9/v1", "max_tokens": 50},
        "rubrics": ["teen"],
        "price": {"input_per_mtok": 2.0, "output_per_mtok": 8.0},
    }
    path = _write(tmp_path / "m.yaml", _base(judges=[judge]))
    plan = plan_sweep(load_manifest(path), path, "s")
    (est,) = estimate_judging(plan)
    usd = [est.usd[k] for k in LEVELS]
    assert None not in usd and usd == sorted(usd), usd
    outputs = [est.tokens[k].output for k in LEVELS]
    assert outputs == sorted(outputs) and outputs[2] == 50 * est.calls["high"]


def test_the_key_env_a_manifest_names_is_the_key_that_authenticates(tmp_path: Path) -> None:
    """A target's ``key_env`` is the key its calls carry, through litellm and ``oai:`` alike.
    Before, the key went into params as ``api_key``, which both providers drop: litellm sent
    OPENAI_API_KEY (another account's key here) and ``oai:`` too, so the server refused them."""
    key = "sk-test-study-target-0123456789KEY"
    server = ServerThread(require_key=key)
    url = server.start()
    params = {"api_base": url, "max_tokens": 20}
    body = {
        "scenarios": {"paths": [str(SCENARIO)]},
        "targets": [
            {"spec": "litellm:openai/loop-target", "params": params, "key_env": "STUDY_TARGET_KEY"},
            {"spec": "oai:loop-target", "params": params, "key_env": "STUDY_TARGET_KEY"},
        ],
        "simulators": ["scripted:sweep-persona"],
        "max_exchanges": 2,
        "store": "results.db",
    }
    manifest = _write(tmp_path / "study.yaml", body)
    before = {name: os.environ.get(name) for name in ("STUDY_TARGET_KEY", "OPENAI_API_KEY")}
    os.environ.update(STUDY_TARGET_KEY=key, OPENAI_API_KEY="sk-another-account-key")
    try:
        res = cli("sweep", str(manifest), "--yes")
        assert server.server is not None
        answered = dict(server.server.billed)
    finally:
        server.stop()
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert res.returncode == 0, res.stdout + res.stderr
    assert answered, "the server answered no call"
    with sqlite3.connect(tmp_path / "results.db") as con:
        targets = {t for (t,) in con.execute("select distinct target from conversations")}
        statuses = {s for (s,) in con.execute("select distinct status from conversations")}
    assert statuses == {"completed"}, statuses
    assert targets == {"litellm:openai/loop-target", "oai:loop-target"}
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("results.db*"))
    assert key.encode() not in stored
