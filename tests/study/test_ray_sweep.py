"""A sweep on Ray (``execution: ray``): tree leases on PostgreSQL, limits shared by a limiter actor,
and a worker killed midway whose trees another worker takes over and finishes.

Real parts: a local Ray cluster, a PostgreSQL database (``postgres_url``: skipped without
$BRANCHPOINT_TEST_POSTGRES; ``.ci/with-postgres .venv/bin/python -m pytest tests/study/test_ray_sweep.py``),
the loopback OpenAI-compatible server over HTTP, SIGKILL of a worker process.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fixtures.leaks import files_holding
from sqlmodel import select

from branchpoint.core.errors import UserError
from branchpoint.gateway.limits import ProviderLimits
from branchpoint.gateway.testing.openai_server import ServerThread
from branchpoint.study.ray_limits import FULL_WAIT_S, SharedLimit

ray = pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"


# In the environment of the cluster's processes only (its raylet starts the workers): an operator's
# key set on the node, which the driver's process does not have.
NODE_KEY = "sk-node-env-only-0123456789"


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local cluster of 2 CPUs: the 2 workers (the limiter actors take no CPU)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NODE_ONLY_KEY", NODE_KEY)
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=100 * 1024 * 1024,
            namespace="branchpoint-tests",
            log_to_driver=False,
        )
    try:
        yield
    finally:
        ray.shutdown()


# -- the shared limiter's rules (no Ray: the state the actor holds) ------------------------------


def test_shared_limit_holds_slots_rate_and_cools_every_owner_down() -> None:
    limit = SharedLimit("oai:x", ProviderLimits(max_concurrency=2, rpm=60))
    t = 100.0
    limit.updated = t
    assert limit.reserve("a", t) == 0.0  # the one request of burst
    wait = limit.reserve("b", t)
    assert wait == pytest.approx(1.0)  # 60 rpm: the next token a second later
    assert limit.reserve("b", t + 1.0) == 0.0
    assert limit.reserve("a", t + 2.0) == FULL_WAIT_S  # two slots held: full, whatever the rate
    assert limit.held == {"a": 1, "b": 1}
    # a 429 reported by a cuts the limit and makes b wait out its Retry-After too
    limit.release("a", "throttled", retry_after=5.0, now=t + 2.0)
    assert limit.limit == 1
    assert limit.reserve("b", t + 3.0) == pytest.approx(4.0)
    limit.release("b", "ok", now=t + 3.0)
    assert limit.reserve("b", t + 7.5) == 0.0
    # a dead worker's slots come back when it is forgotten
    assert limit.forget("b") == 1 and limit.in_flight == 0
    # no cut on other errors; growth back after successes in a row, up to the configured 2
    limit.release("a", "error", now=t + 8.0)
    assert limit.limit == 1
    for i in range(8):
        limit.release("a", "ok", now=t + 9.0 + i)
    assert limit.limit == 2


@pytest.mark.slow
def test_limiter_actor_cools_down_a_worker_for_another_workers_retry_after(
    ray_cluster: None,
) -> None:
    from branchpoint.study.ray_limits import RayLimiter, registry_actor_class

    registry = registry_actor_class().remote()
    limits = ProviderLimits(max_concurrency=4)

    async def scenario() -> float:
        a = RayLimiter("oai:http://x/v1", limits, registry, "worker-a")
        b = RayLimiter("oai:http://x/v1", limits, registry, "worker-b")
        await a.acquire()
        a.release("throttled", retry_after=1.0)
        started = time.monotonic()
        await b.acquire()
        waited = time.monotonic() - started
        b.release("ok")
        return waited

    waited = asyncio.run(scenario())
    assert 0.8 <= waited < 3.0
    # A release is sent without waiting for the actor (a call never waits to free its slot), and
    # the snapshot goes through the registry actor, so it may be read before b's release lands.
    deadline = time.monotonic() + 10
    while True:
        (state,) = ray.get(registry.snapshots.remote())
        if state["ok"] == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert state["throttled"] == 1 and state["ok"] == 1 and state["in_flight"] == 0


# -- tree leases on PostgreSQL ---------------------------------------------------------------------


def test_tree_leases_skip_locked_claims_are_distinct_and_stale_ones_are_taken_over(
    postgres_url: str,
) -> None:
    from datetime import timedelta

    from sqlalchemy import update

    from branchpoint.core.records import Run, TreeLease, utcnow
    from branchpoint.core.store import open_store
    from branchpoint.simulator.tree_lease import TreeLeases

    store = open_store(postgres_url)
    try:
        with store.session() as s:
            s.add(Run(id="r1", kind="sweep"))
            s.commit()
        leases = TreeLeases(store, "r1")
        trees = [f"t{i}" for i in range(12)]
        assert leases.enqueue(trees) == 12
        with ThreadPoolExecutor(6) as pool:
            claims = list(pool.map(lambda i: leases.claim(f"w{i % 3}", 30.0), range(12)))
        assert all(c is not None for c in claims)
        assert sorted(c.tree_id for c in claims if c) == sorted(trees)  # each tree once
        assert leases.claim("w9", 30.0) is None  # all held, none stale
        held = next(c for c in claims if c and c.tree_id == "t0")
        owner = f"w{claims.index(held) % 3}"
        assert leases.beat(owner, "t0") and not leases.beat("someone-else", "t0")
        # its worker goes silent: the heartbeat ages past the stale time
        with store.session() as s:
            s.exec(
                update(TreeLease)
                .where(TreeLease.tree_id == "t0")  # type: ignore[arg-type]
                .values(heartbeat_at=utcnow() - timedelta(seconds=60))
            )
            s.commit()
        taken = leases.claim("w9", 30.0)
        assert taken is not None and taken.tree_id == "t0"
        assert taken.previous_owner == owner and taken.attempts == 2
        assert not leases.beat(owner, "t0")  # the old holder learns it lost the tree
        assert not leases.finish(owner, "t0", "done")
        assert leases.finish("w9", "t0", "done")
        assert leases.counts() == {"running": 11, "done": 1}
        # a re-run makes the unfinished claimable again, keeping what is done
        leases.enqueue(trees[1:])
        assert leases.counts() == {"pending": 11, "done": 1}
    finally:
        store.close()


# -- a whole sweep ---------------------------------------------------------------------------------


def _manifest(
    tmp_path: Path,
    persona_url: str,
    target_url: str,
    rpm: float,
    store: str,
    secrets_file: Path | None = None,
) -> Path:
    path = tmp_path / "study.yaml"
    secrets = f", secrets_file: {secrets_file}" if secrets_file else ""
    path.write_text(
        f"""
name: ray-study
scenarios: {{paths: ["{SCENARIO}"]}}
targets:
  - spec: oai:target-bot
    params: {{api_base: "{target_url}", max_tokens: 64, api_key_env: BOT_KEY}}
    key_env: BOT_KEY
    limits: {{in_flight: 8, rpm: {rpm}}}
simulators: [oai:persona-bot]
simulator_params: {{api_base: "{persona_url}"}}
replicates: 4
max_exchanges: 2
fork: independent
seed: 3
execution: {{mode: ray, workers: 2, concurrency: 2, retries: 2, lease_s: 4, heartbeat_s: 0.5{secrets}}}
store: "{store}"
""",
        encoding="utf-8",
    )
    return path


def _secrets_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keys.env"
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return path


def _ray_dirs() -> list[Path]:
    """This node's Ray session folder (logs, sockets, runtime-env files, and spilled objects by
    default) and the spill folder where it is elsewhere."""
    node = ray._private.worker._global_node
    dirs = {Path(node.get_session_dir_path())}
    if getattr(node, "_fallback_directory", None):
        dirs.add(Path(node._fallback_directory))
    return sorted(dirs)


def _plan(path: Path, store: Any) -> Any:
    from branchpoint.study.manifest import load_manifest
    from branchpoint.study.plan import plan_sweep

    manifest = load_manifest(path)
    return plan_sweep(manifest, path, "ray-study", store=store, with_keys=True)


def test_a_sqlite_store_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from branchpoint.study.ray_exec import check_ray

    monkeypatch.setenv("BOT_KEY", "sk-unused-0123456789")
    path = _manifest(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", 60, "r.db")
    plan = _plan(path, None)
    with pytest.raises(UserError, match=r"store: execution.mode ray needs a PostgreSQL store"):
        check_ray(plan, str(tmp_path / "r.db"))


def test_an_unknown_scripted_model_stops_a_ray_sweep_before_anything_is_stored(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from branchpoint.core.records import Conversation, Run
    from branchpoint.core.store import open_store
    from branchpoint.study.ray_exec import run_sweep_ray

    monkeypatch.setenv("BOT_KEY", "sk-unused-0123456789")
    path = _manifest(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", 60, postgres_url)
    path.write_text(
        path.read_text(encoding="utf-8").replace("spec: oai:target-bot", "spec: scripted:no-bot"),
        encoding="utf-8",
    )
    store = open_store(postgres_url)
    try:
        plan = _plan(path, store)
        with pytest.raises(UserError, match=r"'scripted:no-bot': no scripted model of that name"):
            asyncio.run(run_sweep_ray(plan, store))
        with store.session() as s:  # refused before the Run row, so before any worker
            assert s.get(Run, plan.sweep_id) is None
            assert s.exec(select(Conversation)).first() is None
    finally:
        store.close()


@pytest.mark.slow  # without PostgreSQL the only test here that starts the Ray cluster (4-5 s)
def test_budget_actor_is_shared_by_workers_waits_for_settles_and_refuses_past_the_total(
    ray_cluster: None,
) -> None:
    from branchpoint.gateway.budget import BudgetReached
    from branchpoint.study.ray_budget import RayBudget, budget_actor_class

    actor = budget_actor_class().remote(1.0, None, {"oai:bot": 0.1}, "stop")
    a, b = RayBudget(actor, {}), RayBudget(actor, {})

    async def scenario() -> tuple[float, list[str]]:
        first = await a.acquire("oai:bot", 0.5)  # 0.1 spent + 0.5 held
        # b's call fits only once a's settles for less than it held: b waits, a settles
        waiting = asyncio.ensure_future(b.acquire("oai:bot", 0.5))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        a.settle(first, 0.2)
        second = await asyncio.wait_for(waiting, 10)
        b.settle(second, 0.5)  # spent: 0.1 + 0.2 + 0.5 = 0.8
        refused = []
        for client in (a, b):
            try:
                await client.acquire("oai:bot", 0.3)
            except BudgetReached as exc:
                refused.append(exc.scope)
        state = await actor.state.remote()
        return state["spent_total"], refused

    spent, refused = asyncio.run(scenario())
    assert spent == pytest.approx(0.8)
    assert refused == ["*", "*"]  # both workers refused past the total, neither call booked
    assert ray.get(actor.state.remote())["stopped"]


def test_sweep_on_two_workers_replaces_a_killed_worker_and_holds_the_rpm_limit(
    postgres_url: str, ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import inspect, text

    from branchpoint.core.store import open_store
    from branchpoint.study.monitor import SweepMonitor
    from branchpoint.study.ray_exec import run_sweep_ray

    server_rpm, window_s = 300.0, 10.0
    persona = ServerThread(model="scripted:echo", delay_s=0.01)
    # The key is in no process's environment, the driver's included: only in the secrets file
    # the manifest names, where the workers read it on their node (the server answers 401
    # without it).
    key = "sk-ray-test-0123456789"
    monkeypatch.delenv("BOT_KEY", raising=False)
    secrets = _secrets_file(tmp_path, f"# the target's key\nBOT_KEY={key}\n")
    target = ServerThread(
        model="scripted:echo",
        delay_s=0.05,
        rpm=server_rpm,
        window_s=window_s,
        require_key=key,
    )
    persona_url, target_url = persona.start(), target.start()
    store = open_store(postgres_url)
    killed: dict[str, Any] = {}
    try:
        # the manifest's limit sits under the server's, as a user's would: a margin for jitter
        path = _manifest(tmp_path, persona_url, target_url, server_rpm * 0.9, postgres_url, secrets)
        plan = _plan(path, store)
        planned = {a.conversation_id for _, p in plan.runs for t in p.trees for a in t.arms}

        def killer() -> None:
            # midway, while both workers hold trees (each holds 2: concurrency 2), SIGKILL one
            watcher = open_store(postgres_url)
            try:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    with watcher.engine.connect() as conn:
                        turns = conn.execute(text("select count(*) from turns")).scalar_one()
                        held = conn.execute(
                            text(
                                "select owner, tree_id from tree_leases "
                                "where status = 'running' and owner is not null"
                            )
                        ).all()
                    if turns >= 30 and len({o for o, _ in held}) == 2:
                        owner = held[0][0]
                        killed["owner"] = owner
                        killed["trees"] = [t for o, t in held if o == owner]
                        killed["at"] = time.time()
                        os.kill(int(owner.split(":")[1]), signal.SIGKILL)
                        return
                    time.sleep(0.1)
            finally:
                watcher.close()

        # the live view shows the cluster's limiters (their actors' state, every worker's calls)
        # and calls/s (from the call rows)
        monitor = SweepMonitor(store, plan.sweep_id, {"oai:target-bot": planned}, interval_s=0.2)
        seen: dict[str, tuple[int, int]] = {}  # key -> (most in flight, configured)
        rates: list[float] = []
        sweeping = threading.Event()

        def sampler() -> None:
            while not sweeping.is_set():
                snapshot = monitor.snapshot()
                rates.append(snapshot.calls_per_s)
                for p in snapshot.providers:
                    most = max(seen.get(p.key, (0, 0))[0], p.in_flight)
                    seen[p.key] = (most, p.configured)
                time.sleep(0.05)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        sampling = threading.Thread(target=sampler, daemon=True)
        sampling.start()
        started = time.monotonic()
        try:
            result = asyncio.run(run_sweep_ray(plan, store, monitor=monitor))
        finally:
            sweeping.set()
        elapsed = time.monotonic() - started
        thread.join(5)
        sampling.join(5)
        target_key = next((k for k in seen if target_url in k), None)
        assert target_key is not None, seen
        assert 1 <= seen[target_key][0] <= 8 and seen[target_key][1] == 8, seen
        assert max(rates) > 0  # calls/s, from the store's call rows: the workers make the calls
        assert "owner" in killed, "no worker was killed: the sweep ended before any tree ran"

        with store.engine.connect() as conn:
            convs = conn.execute(
                text("select id, status, n_turns from conversations where run_id = 'ray-study'")
            ).all()
            turns = conn.execute(
                text(
                    "select conversation_id, index, created_at from turns order by "
                    "conversation_id, index"
                )
            ).all()
            leases = {
                r[0]: (r[1], r[2], r[3])
                for r in conn.execute(
                    text("select tree_id, status, attempts, owner from tree_leases")
                )
            }
            run_status = conn.execute(
                text("select status from runs where id = 'ray-study'")
            ).scalar_one()
        with store.engine.connect() as conn:
            for table in inspect(conn).get_table_names():
                dump = str(conn.execute(text(f'select * from "{table}"')).all())
                assert key not in dump, table
        # nor Ray's logs, state files and spilled objects on the node (its runtime-env agent
        # logs what it sets)
        assert files_holding(key, *_ray_dirs()) == []
        # every planned cell once, completed; each transcript's turns once, in order
        assert sorted(c.id for c in convs) == sorted(planned)
        assert {c.status for c in convs} == {"completed"}, convs
        by_conv: dict[str, list[int]] = {}
        for conv_id, index, _ in turns:
            by_conv.setdefault(conv_id, []).append(index)
        for c in convs:
            assert by_conv[c.id] == list(range(c.n_turns)), c.id
        assert result.completed == len(planned) and run_status == "completed"
        # the dead worker's trees were taken over, and resumed from their stored turns (turns
        # from before and after the kill), not started again
        assert all(leases[t][0] == "done" for t in leases)
        for tree in killed["trees"]:
            assert leases[tree][1] >= 2 and leases[tree][2] != killed["owner"]
        # a new worker took the dead one's place (whether it finished a tree depends on how soon
        # it started: the survivor may have taken every tree left), and the dead one finished none
        assert result.workers_replaced == 1
        finishers = {owner for _, _, owner in leases.values()}
        assert 1 <= len(finishers) <= 2 and killed["owner"] not in finishers, finishers
        tree_convs = {
            a.conversation_id
            for _, p in plan.runs
            for t in p.trees
            if _tree(t) in killed["trees"]
            for a in t.arms
        }
        times = [ts.timestamp() for cid, _, ts in turns if cid in tree_convs]
        assert min(times) < killed["at"] < max(times)
        # the requests/min limit held across both workers: the server never had to refuse,
        # and the busiest window came close to the limit (it was what bound the sweep)
        with urllib.request.urlopen(f"{target_url}/_stats", timeout=10) as response:
            stats = json.loads(response.read())
        per_window = server_rpm * window_s / 60
        assert stats["throttled_at"] == []
        busiest = stats["max_in_window"]
        assert busiest <= per_window
        assert busiest >= 0.6 * per_window, (busiest, per_window, elapsed)
    finally:
        store.close()
        persona.stop()
        target.stop()


def test_workers_read_a_key_from_their_nodes_environment_the_driver_needs_none(
    postgres_url: str, ray_cluster: None, tmp_path: Path
) -> None:
    from sqlalchemy import text

    from branchpoint.core.store import open_store
    from branchpoint.study.ray_exec import run_sweep_ray

    assert "NODE_ONLY_KEY" not in os.environ  # only the cluster's processes have it
    persona = ServerThread(model="scripted:echo")
    target = ServerThread(model="scripted:echo", require_key=NODE_KEY)
    persona_url, target_url = persona.start(), target.start()
    store = open_store(postgres_url)
    try:
        path = _manifest(tmp_path, persona_url, target_url, 600, postgres_url)
        path.write_text(
            path.read_text(encoding="utf-8")
            .replace("BOT_KEY", "NODE_ONLY_KEY")
            .replace("replicates: 4", "replicates: 1"),
            encoding="utf-8",
        )
        result = asyncio.run(run_sweep_ray(_plan(path, store), store))
        with store.engine.connect() as conn:
            statuses = conn.execute(text("select distinct status from conversations")).all()
            target_calls = conn.execute(
                text("select count(*) from model_calls where purpose = 'target'")
            ).scalar_one()
        # every target call was let through by the server: each carried the node's key
        assert [s for (s,) in statuses] == ["completed"] and result.completed > 0
        assert target_calls > 0
    finally:
        store.close()
        persona.stop()
        target.stop()


def test_a_key_missing_on_a_workers_node_fails_the_sweep_in_one_line_before_any_tree_grows(
    postgres_url: str, ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import text

    from branchpoint.core.store import open_store
    from branchpoint.study.ray_exec import run_sweep_ray

    # in neither the workers' environment (nor the driver's) nor the secrets file
    monkeypatch.delenv("ABSENT_BOT_KEY", raising=False)
    secrets = _secrets_file(tmp_path, "SOME_OTHER_KEY=sk-other-0123456789\n")
    path = _manifest(
        tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", 60, postgres_url, secrets
    )
    path.write_text(
        path.read_text(encoding="utf-8").replace("BOT_KEY", "ABSENT_BOT_KEY"), encoding="utf-8"
    )
    store = open_store(postgres_url)
    try:
        plan = _plan(path, store)  # the driver of a Ray sweep reads no key: planning goes through
        with pytest.raises(UserError) as caught:
            asyncio.run(run_sweep_ray(plan, store))
        # the worker's line, as a UserError of its own (the CLI prints it, exit 2), not Ray's
        # wrapper with the worker's traceback
        assert type(caught.value) is UserError
        assert re.fullmatch(
            r"targets\[0\]\.key_env: \$ABSENT_BOT_KEY is not set on Ray node \S+ \([0-9a-f.:]+\) "
            rf"\(looked in the worker's environment and {re.escape(str(secrets))}; expected the "
            r"key there\)",
            str(caught.value),
        ), str(caught.value)
        # nothing grown, nothing half-written: the sweep failed, its trees wait for a re-run
        with store.engine.connect() as conn:
            assert conn.execute(text("select count(*) from conversations")).scalar_one() == 0
            assert conn.execute(text("select count(*) from turns")).scalar_one() == 0
            assert conn.execute(text("select count(*) from model_calls")).scalar_one() == 0
            assert (
                conn.execute(text("select status from runs where id = 'ray-study'")).scalar_one()
                == "failed"
            )
            assert {r[0] for r in conn.execute(text("select status from tree_leases"))} == {
                "pending"
            }

        # a secrets file others can read is refused on the node, as ssh refuses such a key
        secrets.write_text("ABSENT_BOT_KEY=sk-open-0123456789\n", encoding="utf-8")
        secrets.chmod(0o644)
        with pytest.raises(UserError) as caught:
            asyncio.run(run_sweep_ray(_plan(path, store), store))
        assert type(caught.value) is UserError
        assert re.fullmatch(
            rf"execution\.secrets_file: {re.escape(str(secrets))} on Ray node .+: open to group "
            r"or others \(mode 0644; expected chmod 600 .+, readable by its owner only\)",
            str(caught.value),
        ), str(caught.value)
    finally:
        store.close()


def test_live_judging_starts_as_each_run_plans_trees_finish(
    postgres_url: str, ray_cluster: None, tmp_path: Path
) -> None:
    """One worker growing one tree at a time: the conversations of the target whose trees are
    done first go to the live judges while the other's are still being grown."""
    from sqlalchemy import text

    from branchpoint.core.store import open_store
    from branchpoint.study.manifest import load_manifest
    from branchpoint.study.plan import plan_sweep
    from branchpoint.study.ray_exec import run_sweep_ray

    server = ServerThread(model="scripted:echo", delay_s=0.2)
    url = server.start()
    path = tmp_path / "live.yaml"
    path.write_text(
        f"""
name: ray-live
scenarios: {{paths: ["{SCENARIO}"]}}
targets:  # params of their own: a run plan each
  - spec: oai:bot-a
    params: {{api_base: "{url}", max_tokens: 32}}
  - spec: oai:bot-b
    params: {{api_base: "{url}", max_tokens: 33}}
simulators: [oai:persona-bot]
simulator_params: {{api_base: "{url}"}}
replicates: 2
max_exchanges: 2
fork: independent
judges: [{{spec: heuristic, rubrics: [teen], when: live}}]
execution: {{mode: ray, workers: 1, concurrency: 1, lease_s: 4, heartbeat_s: 0.5}}
store: "{postgres_url}"
""",
        encoding="utf-8",
    )
    store = open_store(postgres_url)
    live: list[tuple[float, set[str]]] = []

    async def judge(ids: list[str]) -> None:
        live.append((time.time(), set(ids)))

    try:
        plan = plan_sweep(load_manifest(path), path, "ray-live", store=store)
        runs = [{a.conversation_id for t in p.trees for a in t.arms} for _, p in plan.runs]
        assert len(runs) == 2
        asyncio.run(run_sweep_ray(plan, store, on_target_done=judge))
        with store.engine.connect() as conn:
            ended = {
                cid: ts.timestamp()
                for cid, ts in conn.execute(
                    text("select id, updated_at from conversations where run_id = 'ray-live'")
                )
            }
    finally:
        store.close()
        server.stop()
    assert sorted(map(sorted, (ids for _, ids in live))) == sorted(map(sorted, runs))  # once each
    first_at, first = live[0]
    (other,) = [r for r in runs if r != first]
    assert all(ended[c] <= first_at for c in first)  # judged once all of its trees were done
    assert first_at < max(ended[c] for c in other)  # ... while the other's were still growing


def test_live_judges_on_ray_draw_on_the_workers_limits(
    postgres_url: str, ray_cluster: None, tmp_path: Path
) -> None:
    """A live judge calling a target's server takes its slots from the limiter actor the
    workers share: the server never has more calls in flight than the limit, judging included,
    though judges ran while trees were still being grown."""
    from sqlalchemy import text
    from typer.testing import CliRunner

    from branchpoint.core.store import open_store
    from branchpoint.tui.cli import app

    persona = ServerThread(model="scripted:echo", delay_s=0.01)
    target = ServerThread(model="scripted:echo", delay_s=0.15)
    persona_url, target_url = persona.start(), target.start()
    path = tmp_path / "judged.yaml"
    path.write_text(
        f"""
name: ray-judged
scenarios: {{paths: ["{SCENARIO}"]}}
targets:  # params of their own: a run plan each, the first's trees done while the other grows
  - spec: oai:bot-a
    params: {{api_base: "{target_url}", max_tokens: 32}}
    limits: {{in_flight: 2}}
  - spec: oai:bot-b
    params: {{api_base: "{target_url}", max_tokens: 33}}
    limits: {{in_flight: 2}}
simulators: [oai:persona-bot]
simulator_params: {{api_base: "{persona_url}"}}
replicates: 4
max_exchanges: 2
fork: independent
judges:
  - {{spec: oai:bot-a, params: {{api_base: "{target_url}", max_tokens: 16}}, rubrics: [teen], when: live}}
execution: {{mode: ray, workers: 2, concurrency: 1, retries: 0, lease_s: 4, heartbeat_s: 0.5}}
store: "{postgres_url}"
""",
        encoding="utf-8",
    )
    try:
        res = CliRunner().invoke(app, ["sweep", str(path), "--yes"])
        assert res.exit_code in (0, 1), res.output  # 1: judge verdicts of echoed text fail
        with urllib.request.urlopen(f"{target_url}/_stats", timeout=10) as response:
            stats = json.loads(response.read())
        store = open_store(postgres_url)
        try:
            with store.engine.connect() as conn:
                first_judge, last_target = conn.execute(
                    text(
                        "select (select min(created_at) from model_calls where purpose = 'judge'"
                        " and run_id = 'ray-judged'), (select max(created_at) from model_calls "
                        "where purpose = 'target' and run_id = 'ray-judged')"
                    )
                ).one()
        finally:
            store.close()
    finally:
        persona.stop()
        target.stop()
    assert first_judge is not None and first_judge < last_target  # judged while trees grew
    assert 1 <= stats["peak_in_flight"] <= 2, stats


def test_a_budget_on_ray_stops_every_worker_within_it_and_a_bigger_one_completes_the_rest(
    postgres_url: str, ray_cluster: None, tmp_path: Path
) -> None:
    """Both workers reserve from one budget actor: the sweep stops within the budget, what it
    did not do is left interrupted, and a re-run with a bigger budget grows the rest, each turn
    once, its spend rebuilt from the call rows."""
    from sqlalchemy import text

    from branchpoint.core.store import open_store
    from branchpoint.study.manifest import load_manifest
    from branchpoint.study.plan import plan_sweep
    from branchpoint.study.ray_exec import run_sweep_ray

    server = ServerThread(model="scripted:echo", delay_s=0.02)
    url = server.start()
    store = open_store(postgres_url)

    def sweep(name: str, usd_total: float, seed: int) -> Any:
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            f"""
name: {name}
scenarios: {{paths: ["{SCENARIO}"]}}
targets:
  - spec: oai:priced-bot
    params: {{api_base: "{url}", max_tokens: 64}}
    price: {{input_per_mtok: 2000, output_per_mtok: 8000}}
simulators: [oai:priced-bot]  # the persona too: the target's price prices it
simulator_params: {{api_base: "{url}"}}
replicates: 3
max_exchanges: 3
fork: independent
seed: {seed}
budget: {{usd_total: {usd_total}}}
execution: {{mode: ray, workers: 2, concurrency: 2, lease_s: 4, heartbeat_s: 0.5}}
store: "{postgres_url}"
""",
            encoding="utf-8",
        )
        plan = plan_sweep(load_manifest(path), path, name, store=store)
        return asyncio.run(run_sweep_ray(plan, store))

    def spent(name: str) -> float:
        with store.engine.connect() as conn:
            return float(
                conn.execute(
                    text("select coalesce(sum(cost), 0) from model_calls where run_id = :r"),
                    {"r": name},
                ).scalar_one()
            )

    def cells(name: str) -> list[tuple[str, str, str | None]]:
        with store.engine.connect() as conn:
            return [
                (r[0], r[1], r[2])
                for r in conn.execute(
                    text("select id, status, stop_reason from conversations where run_id = :r"),
                    {"r": name},
                )
            ]

    try:
        # what the whole sweep costs, under a budget that does not bind
        whole = sweep("ray-whole", 1000.0, seed=5)
        full = spent("ray-whole")
        assert not whole.stopped_by_budget and full > 0
        n_cells = len(cells("ray-whole"))
        assert {c[1] for c in cells("ray-whole")} == {"completed"}

        # a seed far from it: the same replicate seeds would be answered from the first sweep's
        # calls, free
        small = full / 3
        stopped = sweep("ray-budget", small, seed=1000)
        assert stopped.stopped_by_budget and "usd_total" in stopped.budget_note
        assert 0 < spent("ray-budget") <= small
        left = cells("ray-budget")
        interrupted = [c for c in left if c[1] == "interrupted"]
        assert interrupted and all(c[2] == "stopped_by_budget" for c in interrupted)
        assert not [c for c in left if c[1] in ("failed", "running")]

        # the same budget again: its spend is rebuilt from the call rows, so it stays within it
        # (a budget that started from 0 would spend it once more)
        again = sweep("ray-budget", small, seed=1000)
        assert again.stopped_by_budget and 0 < spent("ray-budget") <= small

        # a bigger budget grows the rest: within it, each turn once
        done = sweep("ray-budget", full * 1.5, seed=1000)
        assert not done.stopped_by_budget
        assert 0 < spent("ray-budget") <= full * 1.5
        final = cells("ray-budget")
        assert len(final) == n_cells and {c[1] for c in final} == {"completed"}
        with store.engine.connect() as conn:
            gaps = conn.execute(
                text(
                    "select c.id from conversations c where c.run_id = 'ray-budget' and "
                    "c.n_turns != (select count(*) from turns t where t.conversation_id = c.id)"
                )
            ).all()
        assert gaps == []
    finally:
        store.close()
        server.stop()


def _tree(spec: Any) -> str:
    from branchpoint.simulator.tree_lease import tree_id

    return tree_id(spec)


def test_a_heartbeat_not_under_half_the_lease_is_a_one_line_manifest_error(
    tmp_path: Path,
) -> None:
    from branchpoint.study.manifest import ManifestError, load_manifest

    path = tmp_path / "study.yaml"
    path.write_text(
        f'scenarios: {{paths: ["{SCENARIO}"]}}\n'
        "targets: [oai:bot]\n"
        "execution: {mode: ray, lease_s: 4, heartbeat_s: 3}\n",
        encoding="utf-8",
    )
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    (error,) = info.value.errors
    assert str(error).startswith(f"{path}:3:")
    assert "execution.heartbeat_s: 3s is not under half of lease_s 4s" in str(error)
