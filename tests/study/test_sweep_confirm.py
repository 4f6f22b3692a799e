"""``branchpoint sweep``'s cost question: above ``confirm_above_usd`` (or with an unpriced model)
it asks on a terminal, refuses without one unless ``--yes``, and writes nothing before the answer.

The target is a priced model (``litellm:openai/gpt-4o-mini``, litellm's local price map, or a
price of its own) served by the project's loopback server, so nothing leaves the machine; the
persona is the sweep tests' scripted one. The terminal is a real pseudo-terminal (``pty``)."""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from branchpoint.gateway.testing.openai_server import ChatServer, ServerThread

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "tests" / "fixtures" / "sweep"
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"
TARGET = "litellm:openai/gpt-4o-mini"
KEY = "sk-dummy-confirm-test-0123456789"
# a price of its own far above litellm's, so this small sweep's plan is well above $1
DEAR = {"input_per_mtok": 500.0, "output_per_mtok": 2000.0}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, ChatServer]]:
    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "sweep_plugin")
    monkeypatch.syspath_prepend(str(SWEEP))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    thread = ServerThread()
    url = thread.start()
    assert thread.server is not None
    try:
        yield url, thread.server
    finally:
        thread.stop()


def write(path: Path, url: str, price: dict[str, float] | None = None, **extra: object) -> Path:
    target: dict[str, object] = {"spec": TARGET, "params": {"api_base": url, "max_tokens": 30}}
    if price is not None:
        target["price"] = price
    body = {
        "scenarios": {"paths": [str(SCENARIO)]},
        "targets": [target],
        "simulators": ["scripted:sweep-persona"],
        "max_exchanges": 2,
        "store": "results.db",
        **extra,
    }
    path.write_text(json.dumps(body), encoding="utf-8")  # JSON is YAML
    return path


def cli(*args: str) -> tuple[int, str, str]:
    from typer.testing import CliRunner

    from branchpoint.tui.cli import app

    # CliRunner's stdin is not a terminal: what CI and scripts see.
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def plan_of(manifest: Path) -> tuple[int, float, float]:
    """(cells, expected USD, high USD) as the plan gives them."""
    from branchpoint.study.manifest import load_manifest
    from branchpoint.study.plan import plan_sweep

    plan = plan_sweep(load_manifest(manifest), manifest, "s")
    expected, high = plan.total("usd", "expected"), plan.total("usd", "high")
    assert expected is not None and high is not None
    return plan.cells, expected, high


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchall()


def test_above_the_threshold_with_no_terminal_is_refused_before_anything_is_written(
    tmp_path: Path, server: tuple[str, ChatServer]
) -> None:
    url, chat = server
    manifest = write(tmp_path / "study.yaml", url, price=DEAR)
    cells, expected, high = plan_of(manifest)
    assert max(expected, high) > 1.0  # the default threshold

    code, out, err = cli("sweep", str(manifest))
    assert code == 2, out + err
    assert err.strip().splitlines() == [
        f"error: {manifest}: the {cells} cell(s) to do may cost up to "
        f"${max(expected, high):.2f} (plan: expected ${expected:.2f}, high ${high:.2f}), "
        "above confirm_above_usd $1.00; no terminal to ask on "
        "(expected --yes to run it)"
    ]
    assert f"({0} done, {cells} to do)" in out  # the plan was printed first
    assert "Run it?" not in out
    assert not (tmp_path / "results.db").exists()
    assert chat.requests == 0

    # A store that exists (another sweep's) does not get this sweep's Run row either.
    free = write(tmp_path / "free.yaml", url, confirm_above_usd=1000.0)
    code, out, err = cli("sweep", str(free))
    assert code == 0, out + err
    served = chat.requests
    assert served > 0
    code, out, err = cli("sweep", str(manifest))
    assert code == 2, out + err
    assert rows(tmp_path / "results.db", "select id from runs") == [("sweep-free",)]
    assert chat.requests == served


def test_yes_runs_it_and_a_finished_sweep_asks_nothing(
    tmp_path: Path, server: tuple[str, ChatServer]
) -> None:
    url, chat = server
    manifest = write(tmp_path / "study.yaml", url, price=DEAR)
    cells, *_ = plan_of(manifest)
    code, out, err = cli("sweep", str(manifest), "--yes")
    assert code == 0, out + err
    db = tmp_path / "results.db"
    assert rows(db, "select status, count(*) from conversations group by status") == [
        ("completed", cells)
    ]
    assert chat.requests > 0 and int(str(rows(db, "select count(*) from model_calls")[0][0])) > 0
    # Nothing left to do costs nothing: no question. The threshold is not part of any cell, so
    # changing it does not make the stored sweep refuse this manifest.
    write(manifest, url, price=DEAR, confirm_above_usd=0.5)
    served = chat.requests
    code, out, err = cli("sweep", str(manifest))
    assert code == 0, out + err
    assert f"({cells} done, 0 to do)" in out and chat.requests == served


def test_below_the_threshold_runs_without_a_question_and_the_manifest_sets_it(
    tmp_path: Path, server: tuple[str, ChatServer]
) -> None:
    url, chat = server
    low = tmp_path / "low"
    low.mkdir()
    # litellm's own price for gpt-4o-mini: this sweep is well under a cent, under $1
    manifest = write(low / "study.yaml", url)
    cells, expected, high = plan_of(manifest)
    assert 0 < max(expected, high) < 1.0
    code, out, err = cli("sweep", str(manifest))
    assert code == 0, out + err
    assert "Run it?" not in out and "confirm_above_usd" not in out + err
    assert rows(low / "results.db", "select count(*) from conversations") == [(cells,)]

    # The same sweep with the manifest's threshold under its cost is refused.
    strict = tmp_path / "strict"
    strict.mkdir()
    manifest = write(strict / "study.yaml", url, confirm_above_usd=0.0001)
    code, out, err = cli("sweep", str(manifest))
    assert code == 2, out + err
    assert err.strip().endswith(
        "above confirm_above_usd $0.0001; no terminal to ask on (expected --yes to run it)"
    )
    assert not (strict / "results.db").exists()


def test_an_unpriced_model_always_asks(tmp_path: Path, server: tuple[str, ChatServer]) -> None:
    url, chat = server
    manifest = tmp_path / "study.yaml"
    body = json.loads(write(manifest, url).read_text(encoding="utf-8"))
    body["targets"] = [{"spec": "oai:lab-model", "params": {"api_base": url}}]
    body["confirm_above_usd"] = 1e9  # no threshold helps: nothing bounds the cost
    manifest.write_text(json.dumps(body), encoding="utf-8")
    code, out, err = cli("sweep", str(manifest))
    assert code == 2, out + err
    cells, _, _ = _cells_only(manifest)
    assert err.strip().splitlines() == [
        f"error: {manifest}: the plan cannot bound the cost of the {cells} cell(s) to do: "
        "oai:lab-model unpriced (not in litellm's price map; a target's price: gives one); no "
        "terminal to ask on (expected --yes to run it)"
    ]
    assert not (tmp_path / "results.db").exists() and chat.requests == 0


def _cells_only(manifest: Path) -> tuple[int, float | None, float | None]:
    from branchpoint.study.manifest import load_manifest
    from branchpoint.study.plan import plan_sweep

    plan = plan_sweep(load_manifest(manifest), manifest, "s")
    return plan.cells, plan.total("usd", "expected"), plan.total("usd", "high")


def test_a_negative_threshold_is_a_manifest_error(tmp_path: Path) -> None:
    manifest = tmp_path / "study.yaml"
    manifest.write_text(
        f"scenarios: {{paths: [{SCENARIO}]}}\ntargets: [{TARGET}]\nconfirm_above_usd: -1\n",
        encoding="utf-8",
    )
    code, out, err = cli("sweep", str(manifest))
    assert code == 2
    assert err.strip().splitlines() == [
        f"{manifest}:3:20: confirm_above_usd: -1 is too small (expected a number >= 0)"
    ]


def on_terminal(manifest: Path, answer: str) -> tuple[int, str]:
    """``branchpoint sweep MANIFEST`` with a pseudo-terminal on stdin, answering ``answer``
    once the question is on stdout; (exit status, stdout)."""
    master, slave = pty.openpty()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SWEEP), str(REPO)]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "200",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "branchpoint.tui.cli", "sweep", str(manifest)],
        cwd=REPO,
        env=env,
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    try:
        assert proc.stdout is not None
        seen = b""
        deadline = time.monotonic() + 120
        while b"Run it? [y/N]" not in seen and time.monotonic() < deadline:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            seen += chunk
        assert b"Run it? [y/N]" in seen, seen.decode(errors="replace")
        os.write(master, answer.encode() + b"\n")
        rest, err = proc.communicate(timeout=180)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    out = (seen + rest).decode(errors="replace")
    return proc.returncode, out + err.decode(errors="replace")


@pytest.mark.slow
def test_on_a_terminal_it_asks_and_no_runs_nothing_and_yes_runs_it(
    tmp_path: Path, server: tuple[str, ChatServer]
) -> None:
    url, chat = server
    manifest = write(tmp_path / "study.yaml", url, price=DEAR)
    cells, expected, high = plan_of(manifest)

    code, out = on_terminal(manifest, "n")
    assert code == 0, out
    assert (
        f"the {cells} cell(s) to do may cost up to ${max(expected, high):.2f} (plan: expected "
        f"${expected:.2f}, high ${high:.2f}), above confirm_above_usd "
        "$1.00.\nRun it? [y/N] "
    ) in out
    assert out.rstrip().endswith("nothing run")
    assert not (tmp_path / "results.db").exists() and chat.requests == 0

    code, out = on_terminal(manifest, "y")
    assert code == 0, out
    assert f"sweep sweep-study: {cells} conversations, {cells} completed" in out
    assert rows(tmp_path / "results.db", "select count(*) from conversations") == [(cells,)]
    assert chat.requests > 0


def test_refused_on_postgresql_leaves_no_run_row(
    tmp_path: Path, server: tuple[str, ChatServer], postgres_url: str
) -> None:
    from branchpoint.core.read import find_run
    from branchpoint.core.store import open_store

    url, chat = server
    manifest = write(tmp_path / "study.yaml", url, price=DEAR)
    code, out, err = cli("sweep", str(manifest), "--db", postgres_url)
    assert code == 2 and "no terminal to ask on (expected --yes to run it)" in err, out + err
    store = open_store(postgres_url)
    try:
        assert find_run(store, "sweep-study") is None
    finally:
        store.close()
    assert chat.requests == 0
    code, out, err = cli("sweep", str(manifest), "--db", postgres_url, "--yes")
    assert code == 0, out + err
    store = open_store(postgres_url)
    try:
        assert find_run(store, "sweep-study") is not None
    finally:
        store.close()
