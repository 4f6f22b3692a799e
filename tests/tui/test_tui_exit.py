"""``branchpoint tui`` exits non-zero when the app crashes (Textual itself only prints the
traceback and returns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import branchpoint.tui.app.app as app_module
from branchpoint.core.store import open_store
from branchpoint.tui.app.app import BranchpointApp
from branchpoint.tui.cli import app as cli


class _Crashing(BranchpointApp):
    def on_mount(self) -> None:
        raise RuntimeError("boom in the app")

    def run(self, *args: Any, **kwargs: Any) -> Any:  # no terminal under the test runner
        return super().run(*args, **{**kwargs, "headless": True})


class _Quitting(BranchpointApp):
    def on_mount(self) -> None:  # Textual runs BranchpointApp.on_mount too (every class's handler)
        self.set_timer(1.0, self.exit)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return super().run(*args, **{**kwargs, "headless": True})


@pytest.mark.parametrize(("app_class", "ok"), [(_Crashing, False), (_Quitting, True)])
def test_a_crash_gives_a_non_zero_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_class: type, ok: bool
) -> None:
    db = tmp_path / "t.db"
    open_store(db).close()
    monkeypatch.setattr(app_module, "BranchpointApp", app_class)
    result = CliRunner().invoke(cli, ["tui", "--db", str(db), "--annotator", "a"])
    assert (result.exit_code == 0) is ok, result.output
