"""Store failures in one line (issues 43 and 45).

A file that is not a readable store (a text file such as notes.md, random bytes, a truncated
SQLite file) is one line and exit 2 in every command that opens a store; before, "malformed" and
"not a database" were DatabaseErrors from the connect hook and each command printed a 145-line
traceback. A store that goes away mid-sweep (SQLite on a full disk, PostgreSQL refusing
connections) ends the sweep with one line, ``store unavailable: <reason>; run the same command
again to continue``, exit 1; the same command run again completes every cell once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from branchpoint.core.store import open_store
from branchpoint.gateway.testing.openai_server import ServerThread

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"
UNAVAILABLE = "; run the same command again to continue"
CELLS = 42  # 7 arms x 6 replicates


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_KEY": "sk-test-unused",
        "COLUMNS": "200",
    }


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "branchpoint.tui.cli", *args],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _manifest(path: Path, url: str, store: str) -> Path:
    path.write_text(
        f"""
name: fails
scenarios: {{paths: ["{SCENARIO}"]}}
targets:
  - spec: oai:bot
    params: {{api_base: "{url}", max_tokens: 64}}
simulators: [oai:bot]
simulator_params: {{api_base: "{url}", max_tokens: 64}}
replicates: 6
max_exchanges: 6
fork: independent
seed: 3
execution: {{concurrency: 4, retries: 0}}
store: "{store}"
""",
        encoding="utf-8",
    )
    return path


def _not_a_store(tmp_path: Path) -> list[Path]:
    notes = tmp_path / "notes.md"
    notes.write_text("# notes\n\nnot a database\n", encoding="utf-8")
    noise = tmp_path / "noise.db"
    noise.write_bytes(bytes(range(256)) * 16)
    real = tmp_path / "real.db"
    open_store(real).close()
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(real.read_bytes()[:6000])  # the header, then half a page
    return [notes, noise, truncated]


@pytest.mark.slow
def test_a_file_that_is_not_a_store_is_one_line_and_exit_2_in_every_command(
    tmp_path: Path,
) -> None:
    manifest_dir = tmp_path / "m"
    manifest_dir.mkdir()
    for bad in _not_a_store(tmp_path):
        manifest = _manifest(manifest_dir / "study.yaml", "http://127.0.0.1:9/v1", str(bad))
        commands = [
            ["runs", "--db", str(bad)],
            ["analyze", "--all", "--db", str(bad)],
            ["report", "--all", "--db", str(bad)],
            ["show", "some-id", "--db", str(bad)],
            ["export", "--all", "--out", str(tmp_path / "x.csv"), "--db", str(bad)],
            ["judge", "--all", "--judge", "heuristic", "--db", str(bad)],
            ["tui", "--db", str(bad)],
            ["sweep", str(manifest), "--plan"],
        ]
        for command in commands:
            res = cli(*command)
            said = f"{command}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
            assert res.returncode == 2, said
            assert "Traceback" not in res.stderr, said
            lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1, said
            assert lines[0].startswith(
                f"error: sqlite:///{bad}: not a readable branchpoint store ("
            ), said


def _rows(store: str, sql: str) -> list[tuple[object, ...]]:
    s = open_store(store)
    try:
        with s.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        s.close()


def _rerun_completes_every_cell_once(manifest: Path, store: str) -> None:
    again = cli("sweep", str(manifest), "--yes")
    assert again.returncode == 0, again.stderr[-3000:]
    assert _rows(store, "select status, count(*) from conversations group by status") == [
        ("completed", CELLS)
    ]
    # every turn once: (conversation, index) is the key; none failed on a duplicate
    assert _rows(
        store,
        'select count(*) from (select conversation_id, "index", count(*) as n from turns '
        'group by conversation_id, "index" having count(*) > 1) as twice',
    ) == [(0,)]
    assert _rows(store, "select status from runs where id = 'fails'") == [("completed",)]


def _one_unavailable_line(res: subprocess.CompletedProcess[str], reason: str) -> None:
    said = f"exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-5000:]}"
    assert res.returncode == 1, said
    assert "Traceback" not in res.stderr, said
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("store unavailable: ")]
    assert len(lines) == 1, said
    assert lines[0].endswith(UNAVAILABLE) and reason in lines[0], said
    others = [
        ln
        for ln in res.stderr.splitlines()
        if ln.strip() and not ln.startswith(("store unavailable: ", "sweep fails: "))
    ]
    assert others == [], said  # the live view's last line, and the one line: nothing else


@pytest.mark.slow
def test_sqlite_on_a_full_disk_ends_in_one_line_and_the_rerun_completes(tmp_path: Path) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("a full disk needs a small tmpfs: mount as root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    server = ServerThread(delay_s=0.01)
    url = server.start()
    try:
        store = str(mount / "r.db")
        manifest = _manifest(tmp_path / "study.yaml", url, store)
        res = cli("sweep", str(manifest), "--yes")
        _one_unavailable_line(res, "database or disk is full")
        subprocess.run(["mount", "-o", "remount,size=64M", str(mount)], check=True)
        _rerun_completes_every_cell_once(manifest, store)
    finally:
        server.stop()
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.slow
def test_postgresql_gone_mid_sweep_ends_in_one_line_and_the_rerun_completes(
    tmp_path: Path, postgres_url: str
) -> None:
    """The database stops taking connections and every connection is cut while the sweep
    writes (what a stopped server looks like to it), then comes back."""
    name = make_url(postgres_url).database
    admin = create_engine(os.environ["BRANCHPOINT_TEST_POSTGRES"], isolation_level="AUTOCOMMIT")
    server = ServerThread(delay_s=0.05)
    url = server.start()
    try:
        manifest = _manifest(tmp_path / "study.yaml", url, postgres_url)
        proc = subprocess.Popen(
            [sys.executable, "-m", "branchpoint.tui.cli", "sweep", str(manifest), "--yes"],
            cwd=REPO,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert server.server is not None
        deadline = time.monotonic() + 120
        while server.server.requests < 20:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.01)
        with admin.connect() as c:
            c.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            c.execute(
                text(
                    "select pg_terminate_backend(pid) from pg_stat_activity "
                    "where datname = :n and pid <> pg_backend_pid()"
                ),
                {"n": name},
            )
        out, err = proc.communicate(timeout=300)
        res = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        _one_unavailable_line(res, "")
        with admin.connect() as c:
            c.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        _rerun_completes_every_cell_once(manifest, postgres_url)
    finally:
        server.stop()
        with admin.connect() as c:
            c.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()
