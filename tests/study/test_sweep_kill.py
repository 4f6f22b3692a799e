"""Issue 11's acceptance line: SIGKILL a sweep at three random moments and re-run it; with fixed
seeds and deterministic models it ends with exactly the planned cells, each once, no turn written
twice, and transcripts identical to a sweep that was never interrupted (into another store).

The sweep is ``branchpoint sweep FILE`` in a subprocess, on the scripted models of
tests/fixtures/sweep/sweep_plugin.py (``scripted:slow`` answers after a delay, so the sweep runs
for a few seconds); the moments are drawn from a seeded generator, after the run has begun
writing turns, so a kill lands inside the run and the test is reproducible.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.engine.crash_checks import assert_prefixes
from test_sweep_cli import REPO, SWEEP, _turns, cli, rows, write

KILLS = 3
DELAY_S = 0.6  # each chatbot reply of the killed runs
LATEST_KILL_S = 1.5  # a kill lands this long at most after the run's first new turn


def _sweep_env() -> dict[str, str]:
    return {
        **os.environ,
        "BRANCHPOINT_PLUGINS": "sweep_plugin",
        "PYTHONPATH": os.pathsep.join([str(SWEEP), str(REPO)]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "SWEEP_TEST_DELAY_S": str(DELAY_S),
    }


def _manifest(folder: Path) -> Path:
    folder.mkdir()
    # one group in flight: the slow replies queue up, so the run lasts a few seconds
    return write(
        folder / "study.yaml",
        ["scripted:slow"],
        replicates=2,
        seed=7,
        execution={"concurrency": 1},
    )


def _planned(manifest: Path) -> set[str]:
    from branchpoint.study.manifest import load_manifest, sweep_id_for
    from branchpoint.study.plan import plan_sweep

    m = load_manifest(manifest)
    plan = plan_sweep(m, manifest, sweep_id_for(m, manifest), store=None, with_keys=False)
    return {a.conversation_id for _, p in plan.runs for t in p.trees for a in t.arms}


def _kill_midway(manifest: Path, db: Path, rng: random.Random) -> int:
    """Start the sweep, SIGKILL it at a random moment after it has begun writing; the turns
    stored when it died."""
    before = _turns(db) if db.exists() else 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "branchpoint.tui.cli", "sweep", str(manifest)],
        cwd=REPO,
        env=_sweep_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (db.exists() and _turns(db) > before):
            assert proc.poll() is None, "the sweep ended before it wrote a turn"
            assert time.monotonic() < deadline, "no turn within 120 s"
            time.sleep(0.02)
        time.sleep(rng.uniform(0, LATEST_KILL_S))
        assert proc.poll() is None, "the sweep finished before the kill: make it slower"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    return _turns(db)


def _transcripts(db: Path) -> dict[str, list[tuple[object, ...]]]:
    out: dict[str, list[tuple[object, ...]]] = {}
    for conv, *turn in rows(
        db,
        'select conversation_id, "index", exchange, role, content, stage, branch_state, fired, '
        'events from turns order by conversation_id, "index"',
    ):
        out.setdefault(str(conv), []).append(tuple(turn))
    return out


@pytest.mark.slow
def test_sigkill_at_three_random_moments_then_the_sweep_equals_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    manifest = _manifest(tmp_path / "killed")
    db = tmp_path / "killed" / "results.db"
    planned = _planned(manifest)
    rng = random.Random(20261)
    stored = [_kill_midway(manifest, db, rng) for _ in range(KILLS)]
    total = len(planned) * 6  # every arm runs 3 exchanges of two turns (scripted:slow is quiet)
    assert 0 < stored[0] < stored[1] < stored[2] < total, stored  # each kill landed midway
    assert_prefixes(str(db))  # what a kill leaves: whole turns, each conversation a prefix

    done = cli("sweep", str(manifest))
    assert done.returncode == 0, done.stdout + done.stderr
    convs = rows(db, "select id, status, n_turns from conversations")
    assert {c[0] for c in convs} == planned and len(convs) == len(planned)  # each cell once
    assert {(s, n) for _, s, n in convs} == {("completed", 6)}
    assert_prefixes(str(db))  # turn indexes contiguous: no turn written twice

    reference = _manifest(tmp_path / "reference")
    clean = cli("sweep", str(reference))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    clean_db = tmp_path / "reference" / "results.db"
    assert _transcripts(db) == _transcripts(clean_db)
    shape = "select id, status, stop_reason, n_turns, parent_id, fork_turn from conversations"
    assert sorted(rows(db, shape)) == sorted(rows(clean_db, shape))
