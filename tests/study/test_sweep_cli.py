"""``branchpoint sweep`` and ``branchpoint runs`` as a user runs them: a real SQLite file, the
scripted models of tests/fixtures/sweep/sweep_plugin.py. The commands run in this process
(typer's runner, as ``branchpoint.tui.cli.main`` ends them); the interrupted sweep is a real process."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fixtures.cli_in_process import run_in_process

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "tests" / "fixtures" / "sweep"
SCENARIO = REPO / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``branchpoint ARGS`` on the sweep plugin's models, in this process."""
    if str(SWEEP) not in sys.path:
        sys.path.insert(0, str(SWEEP))
    return run_in_process(
        *args, stdin=stdin, env={"BRANCHPOINT_PLUGINS": "sweep_plugin", "COLUMNS": "200"}
    )


def write(path: Path, targets: list[str], scenario: Path = SCENARIO, **extra: object) -> Path:
    lines = [
        "scenarios:",
        f"  paths: [{scenario}]",
        f"targets: [{', '.join(targets)}]",
        "simulators: [scripted:sweep-persona]",
        "max_exchanges: 3",
        "store: results.db",
        *(f"{k}: {json.dumps(v)}" for k, v in extra.items()),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as con:
        return con.execute(sql).fetchall()


@pytest.mark.slow
def test_plan_only_prints_the_plan_and_writes_nothing(tmp_path: Path) -> None:
    manifest = write(tmp_path / "study.yaml", ["scripted:quiet", "scripted:eager"])
    from branchpoint.scenarios.loader import require_scenarios
    from branchpoint.scenarios.variants import expand

    cells = 2 * len(expand(require_scenarios([str(SCENARIO)])[0]))
    res = cli("sweep", str(manifest), "--plan")
    assert res.returncode == 0, res.stderr
    assert f"sweep sweep-study: {cells} cells (0 done, {cells} to do)" in res.stdout
    assert "model calls: " in res.stdout and "without" in res.stdout
    assert not (tmp_path / "results.db").exists()


@pytest.mark.slow
def test_sweep_runs_resumes_adds_only_new_cells_and_refuses_changes(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    scenario = tmp_path / SCENARIO.name
    scenario.write_text(SCENARIO.read_text(encoding="utf-8"), encoding="utf-8")
    manifest = write(tmp_path / "study.yaml", ["scripted:quiet"], scenario)
    first = cli("sweep", str(manifest))
    assert first.returncode == 0, first.stderr
    convs = rows(db, "select id, status from conversations")
    assert convs and all(status == "completed" for _, status in convs)
    calls_before = rows(db, "select count(*) from model_calls")[0][0]
    assert f"sweep sweep-study: {len(convs)} conversations, {len(convs)} completed" in first.stdout
    (kind, config) = rows(db, "select kind, config from runs where id = 'sweep-study'")[0]
    stored = json.loads(str(config))
    assert kind == "sweep"
    assert len(stored["manifest_hash"]) == 64 and stored["versions"]["python"]
    assert "git_revision" in stored and stored["manifest"]["max_exchanges"] == 3
    shown = cli("show", convs[0][0], "--db", str(db))  # a transcript shows what made it
    assert shown.returncode == 0, shown.stderr
    assert "run         sweep-study (sweep, completed)" in shown.stdout
    assert f"branchpoint {stored['versions']['branchpoint']}" in shown.stdout

    again = cli("sweep", str(manifest))
    assert again.returncode == 0, again.stderr
    assert f"({len(convs)} done, 0 to do)" in again.stdout
    assert rows(db, "select count(*) from model_calls")[0][0] == calls_before

    # Adding a target and a replicate adds only their cells; the old ones are not touched.
    old = dict(rows(db, "select id, updated_at from conversations"))
    write(manifest, ["scripted:quiet", "scripted:eager"], scenario, replicates=2)
    grown = cli("sweep", str(manifest))
    assert grown.returncode == 0, grown.stderr
    assert f"({len(convs)} done, {3 * len(convs)} to do)" in grown.stdout
    now = dict(rows(db, "select id, updated_at from conversations"))
    assert len(now) == 4 * len(convs)
    assert all(now[k] == v for k, v in old.items())

    # A change that would alter existing cells is refused, naming the field, with exit 2.
    write(manifest, ["scripted:quiet", "scripted:eager"], scenario, replicates=2, seed=5)
    refused = cli("sweep", str(manifest))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"error: {manifest}: seed: changed since sweep sweep-study began (was 0, now 5); that "
        "would alter its existing cells (expected only added targets, conditions or "
        "replicates; --new-sweep starts a new sweep)"
    ]
    # So is an edit of a scenario file: its variants would be new cells, the old ones orphaned.
    write(manifest, ["scripted:quiet", "scripted:eager"], scenario, replicates=2)
    text = scenario.read_text(encoding="utf-8")
    scenario.write_text(text.replace("\nopening: ", "\nopening: hey. ", 1), encoding="utf-8")
    edited = cli("sweep", str(manifest))
    assert edited.returncode == 2
    assert (
        edited.stderr.strip()
        .splitlines()[-1]
        .startswith(f"error: {manifest}: scenarios: scenario ")
    )
    assert "changed since sweep sweep-study began" in edited.stderr
    fresh = cli("sweep", str(manifest), "--new-sweep", "--plan")
    assert fresh.returncode == 0, fresh.stderr
    assert "sweep sweep-study-" in fresh.stdout and "(0 done, " in fresh.stdout

    listed = cli("runs", "--db", str(db))
    assert listed.returncode == 0, listed.stderr
    line = next(ln for ln in listed.stdout.splitlines() if "sweep-study" in ln)
    assert line.split()[:7] == ["sweep-study", "sweep", "completed", str(len(now))] + [
        str(len(now)),
        "0",
        "0",
    ]

    kept = cli("runs", "rm", "sweep-study", "--db", str(db), stdin="n\n")
    # declined: exit 0, nothing done, as a sweep declined at its cost question (docs/operations/budgets.md)
    assert kept.returncode == 0 and "nothing deleted" in kept.stdout
    assert rows(db, "select count(*) from conversations")[0][0] == len(now)
    # no answer at all (a script with nothing on stdin) is no too: it printed "Aborted!", exit 1
    unanswered = cli("runs", "rm", "sweep-study", "--db", str(db), stdin="")
    assert unanswered.returncode == 0, unanswered.stdout + unanswered.stderr
    assert "nothing deleted" in unanswered.stdout and "Aborted" not in unanswered.stdout
    assert rows(db, "select count(*) from conversations")[0][0] == len(now)
    gone = cli("runs", "rm", "sweep-study", "--db", str(db), "--yes")
    assert gone.returncode == 0, gone.stderr
    for table in ("runs", "conversations", "turns", "model_calls", "conversation_provenance"):
        assert rows(db, f"select count(*) from {table}")[0][0] == 0, table


@pytest.mark.slow
def test_a_scenario_file_added_or_removed_is_refused_unless_add_cells(tmp_path: Path) -> None:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    shutil.copy(SCENARIO, folder / SCENARIO.name)
    other = SCENARIO.parent / "teen-rs-be-my-girlfriend.yaml"
    manifest = write(tmp_path / "study.yaml", ["scripted:quiet"], folder)
    first = cli("sweep", str(manifest))
    assert first.returncode == 0, first.stderr
    before = rows(tmp_path / "results.db", "select count(*) from conversations")[0][0]

    shutil.copy(other, folder / other.name)  # dropped into the folder the manifest names
    added = cli("sweep", str(manifest), "--plan")
    assert added.returncode == 2
    assert added.stderr.strip().splitlines() == [
        f"error: {manifest}: scenarios: 1 scenario(s) added to the files the manifest names since "
        "sweep sweep-study began ('teen-rs-be-my-girlfriend'); they would add cells (expected "
        "--add-cells to add them, or --new-sweep to start a new sweep)"
    ]
    grown = cli("sweep", str(manifest), "--add-cells")
    assert grown.returncode == 0, grown.stderr
    assert rows(tmp_path / "results.db", "select count(*) from conversations")[0][0] > before
    assert cli("sweep", str(manifest), "--plan").returncode == 0  # now part of the sweep

    (folder / SCENARIO.name).unlink()
    removed = cli("sweep", str(manifest), "--plan", "--add-cells")
    assert removed.returncode == 2
    assert (
        "scenarios: scenario 'teen-ah-rail-bridge-jump' of sweep sweep-study is no longer in "
        in (removed.stderr)
    )


def test_bad_manifest_exits_2_with_its_one_line(tmp_path: Path) -> None:
    bad = REPO / "tests" / "fixtures" / "bad_manifests" / "unknown_key.yaml"
    res = cli("sweep", str(bad))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"{bad}:4:1: replicate: unknown key 'replicate' (did you mean 'replicates'?)"
    ]


@pytest.mark.parametrize(
    ("target", "extra", "message"),
    [
        (
            "scripted:quiet",
            {"execution": {"mode": "ray"}},
            "store: execution.mode ray needs a PostgreSQL store (got a SQLite file;",
        ),
    ],
)
def test_what_is_not_built_is_refused_before_any_call(
    tmp_path: Path, target: str, extra: dict[str, object], message: str
) -> None:
    manifest = write(tmp_path / "study.yaml", [target], **extra)
    res = cli("sweep", str(manifest))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].startswith(f"error: {manifest}: {message}")
    assert not (tmp_path / "results.db").exists()  # refused before the store is opened


@pytest.mark.slow
def test_judges_run_live_and_after_and_error_verdicts_exit_1(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    judges = [
        {"spec": "heuristic", "rubrics": ["teen"], "when": "live"},
        {"spec": "scripted:echo", "rubrics": ["teen"], "when": "after", "params": {}},
    ]
    manifest = write(tmp_path / "study.yaml", ["scripted:quiet"], judges=judges)
    res = cli("sweep", str(manifest))
    # scripted:echo repeats its prompt, never a verdict: its verdicts are errors, so exit 1.
    assert res.returncode == 1, res.stderr
    errors = rows(db, "select count(*) from judgments where verdict = 'error'")[0][0]
    assert errors > 0 and f"{errors} verdict(s) are error" in res.stdout
    by_judge = dict(rows(db, "select judge, count(*) from judgments group by judge"))
    assert set(by_judge) == {"heuristic", "scripted:echo"}


@pytest.mark.slow
def test_a_judge_added_after_the_conversations_is_in_the_plan_for_what_it_has_left(
    tmp_path: Path,
) -> None:
    db = tmp_path / "results.db"
    manifest = write(tmp_path / "study.yaml", ["scripted:quiet"])
    assert cli("sweep", str(manifest)).returncode == 0
    judges = [{"spec": "scripted:echo", "rubrics": ["teen"], "when": "after"}]
    write(manifest, ["scripted:quiet"], judges=judges)

    def judging_calls() -> str:
        res = cli("sweep", str(manifest), "--plan")
        assert res.returncode == 0, res.stderr
        line = next(x for x in res.stdout.splitlines() if x.startswith("judging scripted:echo"))
        return line.split(": ", 1)[1].split(" calls")[0]

    # every conversation is done, but none is judged: one call per original chatbot turn
    replies = rows(
        db, "select count(*) from turns where role = 'assistant' and origin_turn_id is null"
    )[0][0]
    # high: every call at its most attempts (an answer that does not validate is asked again)
    assert replies > 0 and judging_calls() == f"{replies} / {replies} / {3 * replies}"
    assert cli("sweep", str(manifest)).returncode == 1  # the echo's verdicts are errors
    assert judging_calls() == "0 / 0 / 0"


@pytest.mark.slow
def test_the_judging_pass_keeps_the_sweeps_concurrency_in_flight(tmp_path: Path) -> None:
    from branchpoint.gateway.testing.openai_server import spawn

    server, url = spawn(200.0)  # a judge answering in 200 ms, in a process of its own
    try:
        judges = [{"spec": "oai:judge", "rubrics": ["teen"], "params": {"api_base": url}}]
        manifest = write(
            tmp_path / "study.yaml",
            ["scripted:quiet"],
            scenario=REPO
            / "branchpoint"
            / "scenarios"
            / "library"
            / "teen",  # many different transcripts
            judges=judges,
            execution={"concurrency": 12},
        )
        res = cli("sweep", str(manifest), "--yes")  # oai:judge is unpriced: it would ask
        with urllib.request.urlopen(f"{url}/_stats", timeout=30) as answer:
            stats = json.loads(answer.read())
    finally:
        server.kill()
        server.wait()
    assert res.returncode == 1, res.stderr  # the echo server's answers are no verdicts: errors
    assert stats["requests"] >= 36
    # 12 units in flight, as the manifest says, not the judge command's default of 4
    assert stats["peak_in_flight"] == 12


@pytest.mark.slow
def test_failed_conversations_exit_1_with_their_reason(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manifest = tmp_path / "study.yaml"
    write(manifest, ["scripted:quiet"])
    text = manifest.read_text(encoding="utf-8").replace(
        "targets: [scripted:quiet]",
        "targets:\n  - spec: oai:some-model\n"
        f"    params: {{api_base: 'http://127.0.0.1:{port}/v1'}}",
    )
    manifest.write_text(text + "execution: {retries: 0}\n", encoding="utf-8")
    res = cli("sweep", str(manifest), "--yes")  # oai:some-model is unpriced: it would ask
    assert res.returncode == 1, res.stderr
    n = rows(tmp_path / "results.db", "select count(*) from conversations")[0][0]
    assert f"{n} conversations, 0 completed, {n} not completed" in res.stdout
    assert f"not completed, by reason: target_error {n}" in res.stdout


@pytest.mark.slow
def test_the_key_comes_from_key_env_and_never_reaches_the_store(tmp_path: Path) -> None:
    secret = "sk-test-0123456789abcdefSECRET"
    manifest = tmp_path / "study.yaml"
    write(manifest, ["scripted:quiet"])
    text = manifest.read_text(encoding="utf-8").replace(
        "targets: [scripted:quiet]", "targets:\n  - {spec: scripted:quiet, key_env: STUDY_KEY}"
    )
    manifest.write_text(text, encoding="utf-8")
    os.environ.pop("STUDY_KEY", None)
    unset = cli("sweep", str(manifest))
    assert unset.returncode == 2
    assert re.fullmatch(  # positioned at the key_env the manifest names
        rf"error: {re.escape(str(manifest))}:\d+:\d+: targets\[0\]\.key_env: \$STUDY_KEY is not "
        r"set \(expected the target's API key in it\)",
        unset.stderr.strip().splitlines()[-1],
    )
    os.environ["STUDY_KEY"] = secret
    try:
        res = cli("sweep", str(manifest))
    finally:
        del os.environ["STUDY_KEY"]
    assert res.returncode == 0, res.stderr
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("results.db*"))
    assert b"STUDY_KEY" in stored  # the variable's name is part of the manifest
    assert secret.encode() not in stored and secret not in res.stdout + res.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
@pytest.mark.slow
def test_an_interrupted_sweep_continues_with_every_cell_once(tmp_path: Path, sig: int) -> None:
    db = tmp_path / "results.db"
    manifest = write(tmp_path / "study.yaml", ["scripted:slow"], replicates=2)
    env = {
        **os.environ,
        "BRANCHPOINT_PLUGINS": "sweep_plugin",
        "PYTHONPATH": os.pathsep.join([str(SWEEP), str(REPO)]),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "SWEEP_TEST_DELAY_S": "0.2",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "branchpoint.tui.cli", "sweep", str(manifest)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until some turns are stored, and the sweep not done
        time.sleep(0.2)
        if db.exists() and _turns(db) >= 6:
            break
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    if sig == signal.SIGINT:
        assert proc.returncode == 130, err
        assert "run the same manifest again to continue" in err
    else:
        assert proc.returncode == -signal.SIGKILL
    turns_before = _turns(db)

    res = cli("sweep", str(manifest))
    assert res.returncode == 0, res.stderr
    convs = rows(db, "select id, status, n_turns from conversations")
    planned = int(res.stdout.split(" cells ")[0].rsplit(" ", 1)[-1])
    assert 6 <= turns_before < planned * 6  # it was stopped midway
    assert len(convs) == planned == len({c[0] for c in convs})
    assert all(status == "completed" and n == 6 for _, status, n in convs)
    # every turn once: no index written twice in any conversation
    assert rows(db, "select count(*) from turns")[0][0] == sum(n for *_, n in convs)


def _turns(db: Path) -> int:
    try:
        return int(rows(db, "select count(*) from turns")[0][0])
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0


def test_sweep_resume_and_rm_on_postgresql(tmp_path: Path, postgres_url: str) -> None:
    manifest = write(tmp_path / "study.yaml", ["scripted:quiet"])
    first = cli("sweep", str(manifest), "--db", postgres_url)
    assert first.returncode == 0, first.stderr
    again = cli("sweep", str(manifest), "--db", postgres_url)
    assert again.returncode == 0 and ", 0 to do)" in again.stdout, again.stderr
    # nothing ran again: the call rows stored are the first run's
    before, after = (re.search(r"model calls stored: .*", r.stdout) for r in (first, again))
    assert before and after and after.group() == before.group(), again.stdout
    listed = cli("runs", "--db", postgres_url)
    assert "sweep-study" in listed.stdout and " sweep " in listed.stdout
    gone = cli("runs", "rm", "sweep-study", "--yes", "--db", postgres_url)
    assert gone.returncode == 0, gone.stderr
    assert "no runs in this store" in cli("runs", "--db", postgres_url).stdout


def test_a_second_sweep_answered_from_the_cache_says_so(tmp_path: Path) -> None:
    # The same cells under a second sweep name in one store are answered from the cache (same
    # seeds, same params); the summary said "model calls stored: 7 persona, 9 target" as if
    # they had been sent again.
    first = cli("sweep", str(write(tmp_path / "a.yaml", ["scripted:quiet"], name="a")))
    assert first.returncode == 0, first.stderr
    assert "of them answered from the cache" not in first.stdout, first.stdout
    again = cli("sweep", str(write(tmp_path / "b.yaml", ["scripted:quiet"], name="b")))
    assert again.returncode == 0, again.stderr
    db = tmp_path / "results.db"
    cached = rows(
        db, "select purpose, count(*) from model_calls where run_id = 'b' and cached group by 1"
    )
    assert cached and all(n > 0 for _, n in cached)
    hits = ", ".join(f"{n} {purpose}" for purpose, n in sorted(cached))
    assert f"of them answered from the cache (not sent): {hits}" in again.stdout, again.stdout
