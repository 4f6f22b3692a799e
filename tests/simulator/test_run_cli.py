"""``branchpoint run`` and ``branchpoint show`` on the command line."""

from __future__ import annotations

import json
import platform
import re
import sqlite3
import subprocess
from importlib.metadata import version

import pytest
from fixtures.engine.helpers import HERE as FIX  # importing it puts the test plugin on sys.path
from fixtures.engine.helpers import plugin_env, run_cli
from typer.testing import CliRunner


@pytest.fixture
def cli(monkeypatch):  # type: ignore[no-untyped-def]
    from branchpoint.tui.cli import app

    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "engine_plugin")
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()

    def invoke(*args: str):  # type: ignore[no-untyped-def]
        result = runner.invoke(app, list(args))
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    return invoke


def test_run_prints_a_summary_and_show_marks_forks_events_and_stages(cli, tmp_path) -> None:
    db = tmp_path / "cli.db"
    run = ("run", str(FIX / "on_event.yaml"), "--target", "scripted:slowbot")
    run += ("--simulator", "scripted:persona", "--db", str(db), "--max-turns", "5")
    res = cli(*run, "--run-id", "cli-1")
    assert res.exit_code == 0, res.output
    with sqlite3.connect(db) as con:
        rows = con.execute("select id, fork_turn, n_turns from conversations").fetchall()
    assert len(rows) == 3 and all(n == 10 for _, _, n in rows)
    for conv_id, _, _ in rows:
        assert conv_id in res.output
    assert (
        "by status/stop reason: completed/max_turns 3" in res.output and "run cli-1" in res.output
    )
    # exchanges 1-3 shared (2 persona, 3 target calls), then two arms x exchanges 4-5 (2 + 2 each)
    assert "model calls: 6 persona, 7 target" in res.output

    forked = next(r[0] for r in rows if r[1] is not None)
    shown = cli("show", forked[:10], "--db", str(db))  # a unique prefix is enough
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert f"conversation {forked}" in out and "stop reason max_turns" in out
    assert "fork: own turns of this arm start here (turn 6)" in out
    assert "fired: help=decline" in out and "events: help_offer" in out
    assert "stage chat" in out and "stage after" in out
    assert (
        out.index("events: help_offer")
        < out.index("fork: own turns")
        < out.index("fired: help=decline")
    )
    # then its provenance, the stored row's hashes in full
    with sqlite3.connect(db) as con:
        config, persona, rules = con.execute(
            "select config_hash, persona_template_hash, event_rules_hash "
            "from conversation_provenance where conversation_id = ?",
            (forked,),
        ).fetchone()
    tail = out[out.index("provenance (texts by hash") :]
    for line in (f"config      {config}", f"persona     {persona}", f"event rules {rules}"):
        assert line in tail
    assert "detector    rules" in tail and "run         cli-1 (run, completed)" in tail
    # and the code that made it, as a sweep records it: this checkout's revision, the versions
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=FIX, capture_output=True, text=True
    ).stdout.strip()
    with sqlite3.connect(db) as con:
        (stored,) = con.execute("select config from runs where id = 'cli-1'").fetchone()
    stored = json.loads(stored)
    assert stored["versions"]["python"] == platform.python_version()
    assert stored["versions"]["branchpoint"] == version("branchpoint")
    if head:  # a checkout: the revision, -dirty where files differ from it
        assert stored["git_revision"].removesuffix("-dirty") == head
        assert f"git         {stored['git_revision']}" in tail
    assert f"branchpoint {version('branchpoint')}" in tail

    # a resume by other code says so in its entry; the run's start keeps its own
    made_by = {**stored, "git_revision": "0" * 40}
    with sqlite3.connect(db) as con:
        con.execute("update runs set config = ? where id = 'cli-1'", (json.dumps(made_by),))
    resumed = cli(*run, "--resume", "cli-1")
    assert resumed.exit_code == 0, resumed.output
    with sqlite3.connect(db) as con:
        (after,) = con.execute("select config from runs where id = 'cli-1'").fetchone()
    after = json.loads(after)
    assert after["git_revision"] == "0" * 40
    assert after["resumes"][-1].get("git_revision") == stored["git_revision"]
    assert "versions" not in after["resumes"][-1]  # unchanged, so not repeated


def test_a_rerun_served_from_the_cache_says_so(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A second run with the same seed and params is answered from the cache; its summary said
    # "model calls: 6 persona, 7 target" as if the 13 calls had been made again.
    db = tmp_path / "cli.db"
    run = ("run", str(FIX / "on_event.yaml"), "--target", "scripted:slowbot")
    run += ("--simulator", "scripted:persona", "--db", str(db), "--max-turns", "5")
    first = cli(*run, "--run-id", "a")
    assert first.exit_code == 0 and "from the cache" not in first.output, first.output
    again = cli(*run, "--run-id", "b")
    assert again.exit_code == 0, again.output
    with sqlite3.connect(db) as con:
        cached = dict(
            con.execute(
                "select purpose, count(*) from model_calls where run_id = 'b' and cached "
                "group by purpose"
            ).fetchall()
        )
    assert cached == {"persona": 6, "target": 7}
    flat = " ".join(again.output.split())  # the line wraps at the terminal's width
    assert (
        "model calls: 6 persona, 7 target, 0 detector (of them answered from the cache: 6 "
        "persona, 7 target)" in flat
    )


def test_show_prints_model_text_literally(cli, tmp_path) -> None:
    db = tmp_path / "m.db"
    res = cli(
        "run",
        str(FIX / "at_turn.yaml"),
        "--target",
        "scripted:markupbot",
        "--simulator",
        "scripted:persona",
        "--db",
        str(db),
        "--max-turns",
        "1",
        "--variant",
        _baseline_id(),
    )
    assert res.exit_code == 0, res.output
    with sqlite3.connect(db) as con:
        (conv_id,) = con.execute("select id from conversations").fetchone()
    out = cli("show", conv_id, "--db", str(db)).output
    assert "[bold red]loud[/] " in out  # markup shown, not applied
    assert "\x1b" not in out and "\x07" not in out and "pwned" not in out.replace("0;pwned", "")


def _baseline_id() -> str:
    from branchpoint.scenarios.loader import load_scenarios
    from branchpoint.scenarios.variants import expand

    (scenario,), _ = load_scenarios([FIX / "at_turn.yaml"])
    return expand(scenario)[0].id


def test_show_unknown_conversation_and_missing_store(cli, tmp_path) -> None:
    from branchpoint.core.errors import UserError

    with pytest.raises(UserError, match="no such store"):
        cli("show", "abc", "--db", str(tmp_path / "nope.db"))


@pytest.mark.slow
def test_errors_are_one_line_without_traceback(tmp_path) -> None:
    cases = [
        ([str(FIX / "at_turn.yaml"), "--condition", "no_such_prompt"], "unknown condition"),
        ([str(tmp_path / "missing.yaml")], "no such scenario file"),
        ([str(FIX / "at_turn.yaml"), "--target", "gpt-4o"], "unknown model spec"),
        ([str(FIX / "at_turn.yaml"), "--variant", "deadbeef"], "no such variant"),
        ([str(FIX / "at_turn.yaml"), "--resume", "never-ran"], "no such run"),
    ]
    for args, message in cases:
        proc = run_cli("run", *args, "--db", str(tmp_path / "e.db"), timeout=120)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        lines = [
            ln for ln in proc.stderr.splitlines() if ln.strip() and not re.match(r"^turns", ln)
        ]
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (
            proc.stderr
        )
        assert "Traceback" not in proc.stderr


def test_event_rules_file_replaces_the_keyword_rules(cli, tmp_path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("help_offer: ['tell me more']\n", encoding="utf-8")
    db = tmp_path / "r.db"
    res = cli(
        "run",
        str(FIX / "on_event.yaml"),
        "--target",
        "scripted:slowbot",
        "--simulator",
        "scripted:persona",
        "--db",
        str(db),
        "--max-turns",
        "3",
        "--event-rules",
        str(rules),
    )
    assert res.exit_code == 0, res.output
    with sqlite3.connect(db) as con:
        first = con.execute('select events from turns where "index" = 1').fetchall()
        forks = con.execute(
            "select fork_turn from conversations where fork_turn is not null"
        ).fetchall()
    # "ok, tell me more" now counts as a help offer, so the arms fork after exchange 1
    assert all("help_offer" in e for (e,) in first) and forks == [(2,)]

    bad = tmp_path / "bad.yaml"
    for text, message in (
        ("nope: ['x']\n", "unknown event"),
        ("limit: ['(']\n", "invalid regular expression"),
    ):
        bad.write_text(text, encoding="utf-8")
        from branchpoint.core.errors import UserError

        with pytest.raises(UserError, match=message):
            cli("run", str(FIX / "on_event.yaml"), "--event-rules", str(bad), "--db", str(db))


def test_an_unregistered_scripted_model_is_a_usage_error_before_anything_is_stored(
    tmp_path,
) -> None:
    # Registered names (the plugin's) and built-in ones run; an unknown name stops the run
    # before its Run row, instead of failing every conversation (it once answered as whichever
    # scripted model was created first).
    db = tmp_path / "cli.db"
    proc = run_cli(
        "run",
        str(FIX / "on_event.yaml"),
        "--target",
        "scripted:echo",
        "--target",
        "scripted:no-such-bot",
        "--simulator",
        "scripted:persona",
        "--db",
        str(db),
        "--max-turns",
        "3",
        env=plugin_env(),
        timeout=120,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not re.match(r"^turns", ln)]
    assert lines == [
        "error: model spec 'scripted:no-such-bot': no scripted model of that name is registered "
        "(built in: scripted:echo)"
    ], proc.stderr
    with sqlite3.connect(db) as con:
        assert con.execute("select count(*) from runs").fetchone() == (0,)
        assert con.execute("select count(*) from conversations").fetchone() == (0,)


def test_progress_through_a_pipe_is_plain_lines_during_the_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # stderr is a pipe here: rich draws no live bar there, so the run printed its bar only at
    # the end; it now prints a line every few seconds, and the last count at the end.
    args = ("run", str(FIX / "on_event.yaml"), "--target", "scripted:slowbot")
    args += ("--simulator", "scripted:persona", "--db", str(tmp_path / "p.db"), "--max-turns", "3")
    proc = run_cli(*args, env=plugin_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("turns")]
    assert lines and re.fullmatch(r"turns (\d+)/\1, 100%, 0:\d\d:\d\d", lines[-1]), proc.stderr
    assert "━" not in proc.stderr  # no bar drawn into the pipe


def test_piped_progress_lines_come_at_the_interval_and_not_between() -> None:
    from branchpoint.tui.commands import run_cmds

    class Console:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def print(self, text: str, **_: object) -> None:
            self.lines.append(text)

    console = Console()
    clock = [100.0]
    real = run_cmds.time.monotonic
    run_cmds.time.monotonic = lambda: clock[0]  # type: ignore[assignment]
    try:
        show = run_cmds._Throttled(run_cmds._Lines(console), interval_s=5.0)
        for done in range(1, 40):  # a turn every 0.5 s for 19.5 s, of an unknown total
            clock[0] += 0.5
            show(done, 0)
        show(40, 40)
        show.flush()
    finally:
        run_cmds.time.monotonic = real  # type: ignore[assignment]
    assert console.lines == [
        "turns 1, 0:00:00",
        "turns 11, 0:00:05",
        "turns 21, 0:00:10",
        "turns 31, 0:00:15",
        "turns 40/40, 100%, 0:00:19",
    ]
