"""The ``branchpoint`` process ends without the interpreter's teardown, and loses nothing by it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _main_in_process(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``branchpoint ARGS`` through ``branchpoint.tui.cli.main``, in a process that also leaves a
    non-daemon thread and an exit hook behind, each writing a file when it has run."""
    code = textwrap.dedent(
        f"""
        import atexit, sys, threading, time
        sys.argv = ["branchpoint", *{list(args)!r}]
        import branchpoint.tui.cli
        def late():
            time.sleep(0.3)
            open({str(tmp_path / "thread")!r}, "w").write("joined")
        threading.Thread(target=late).start()
        atexit.register(lambda: open({str(tmp_path / "hook")!r}, "w").write("ran"))
        branchpoint.tui.cli.main()
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_a_command_that_succeeds_exits_0_with_its_output_threads_and_hooks(
    tmp_path: Path,
) -> None:
    scenario = (
        REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"
    )
    done = _main_in_process(tmp_path, "variants", str(scenario))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) > 10 and lines[-1].strip()  # all of it, the last line too
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "hook").read_text() == "ran"


def test_a_command_that_fails_keeps_its_status_and_message(tmp_path: Path) -> None:
    done = _main_in_process(tmp_path, "run", str(tmp_path / "missing.yaml"), "--db", "x.db")
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "missing.yaml" in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "hook").read_text() == "ran"
