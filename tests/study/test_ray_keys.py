"""Issue 33, item 8: on Ray, API keys never go through a channel Ray logs or stores.

``branchpoint sweep`` as a user runs it (a subprocess), on a local cluster the sweep starts itself
(its workers inherit the driver's environment), a PostgreSQL store and the loopback server, which
answers 401 to a request without the target's key. With the key nowhere, the sweep stops with one
line and no traceback before a tree grows; with the key only in the secrets file the manifest
names (not in the driver's environment, so the workers' neither), the sweep completes, which the
server allows only with the key. Then every file under the Ray temp folder of both runs (session
logs, runtime-env files, spilled objects, the processes' temp files: ``TMPDIR`` and
``RAY_TMPDIR`` point there) and every row of the store is searched for the key: nothing.

Needs ``$BRANCHPOINT_TEST_POSTGRES`` (``.ci/with-postgres``); about a minute (two cluster starts).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.leaks import files_holding

from branchpoint.gateway.testing.openai_server import ServerThread

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"
KEY = "sk-fake-ray-secrets-file-5b1f0c9e7d"


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    # short: Ray's socket paths under it must fit in 107 bytes (a pytest tmp_path may not)
    folder = Path(tempfile.mkdtemp(prefix="bpkeys", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _sweep(manifest: Path, ray_tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("BOT_KEY", "RAY_ADDRESS", "COLUMNS")}
    env.update(
        PYTHONPATH=str(REPO),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        TMPDIR=str(ray_tmp),
        RAY_TMPDIR=str(ray_tmp),
    )
    return subprocess.run(
        [sys.executable, "-m", "branchpoint.tui.cli", "sweep", str(manifest), "--yes"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


def test_keys_reach_ray_workers_from_the_secrets_file_on_their_node_and_nowhere_else(
    postgres_url: str, tmp_path: Path, ray_tmp: Path
) -> None:
    from sqlalchemy import inspect, text

    from branchpoint.core.store import open_store

    persona = ServerThread(model="scripted:echo")
    target = ServerThread(model="scripted:echo", require_key=KEY)
    persona_url, target_url = persona.start(), target.start()
    secrets = tmp_path / "keys.env"
    secrets.write_text("# this node's keys\nOTHER_KEY=sk-other\n", encoding="utf-8")
    secrets.chmod(0o600)
    manifest = tmp_path / "study.yaml"
    manifest.write_text(
        f"""name: ray-keys
scenarios: {{paths: ["{SCENARIO}"]}}
targets:
  - spec: oai:target-bot
    params: {{api_base: "{target_url}", max_tokens: 32, api_key_env: BOT_KEY}}
    key_env: BOT_KEY
simulators: [oai:persona-bot]
simulator_params: {{api_base: "{persona_url}", max_tokens: 32}}
max_exchanges: 2
fork: independent
execution: {{mode: ray, workers: 1, concurrency: 2, secrets_file: {secrets}}}
store: "{postgres_url}"
""",
        encoding="utf-8",
    )
    try:
        # the key in no environment and not in the file: one line, exit 2, nothing grown
        missing = _sweep(manifest, ray_tmp)
        assert missing.returncode == 2, missing.stdout + missing.stderr
        assert "Traceback" not in missing.stderr + missing.stdout
        errors = [line for line in missing.stderr.splitlines() if line.startswith("error:")]
        assert errors == [
            next(line for line in errors if line.startswith("error: targets[0].key_env: $BOT_KEY"))
        ], missing.stderr
        assert "is not set on Ray node " in errors[0]
        assert (
            f"(looked in the worker's environment and {secrets}; expected the key there)"
            in (errors[0])
        )
        store = open_store(postgres_url)
        try:
            with store.engine.connect() as conn:
                assert conn.execute(text("select count(*) from turns")).scalar_one() == 0
        finally:
            store.close()

        # the key only in the secrets file on the (one) node: the sweep completes
        secrets.write_text(f"OTHER_KEY=sk-other\nBOT_KEY={KEY}\n", encoding="utf-8")
        done = _sweep(manifest, ray_tmp)
        assert done.returncode == 0, done.stdout + done.stderr
        store = open_store(postgres_url)
        try:
            with store.engine.connect() as conn:
                statuses = conn.execute(
                    text("select distinct status from conversations where run_id = 'ray-keys'")
                ).all()
                assert [s for (s,) in statuses] == ["completed"]
                target_calls = conn.execute(
                    text("select count(*) from model_calls where purpose = 'target'")
                ).scalar_one()
                assert target_calls > 0  # each one let through by the server: the key arrived
                for table in inspect(conn).get_table_names():
                    dump = str(conn.execute(text(f'select * from "{table}"')).all())
                    assert KEY not in dump, table
        finally:
            store.close()
        # both runs' Ray folders: session logs, runtime-env files, spilled objects, temp files
        assert any(ray_tmp.rglob("session_*")), sorted(ray_tmp.iterdir())
        assert any(p.suffix in (".log", ".out", ".err") for p in ray_tmp.rglob("*"))
        assert files_holding(KEY, ray_tmp) == []
        assert KEY not in missing.stdout + missing.stderr + done.stdout + done.stderr
    finally:
        persona.stop()
        target.stop()
