"""Inspect AI eval logs from a scripted run, read back with Inspect's own reader."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.engine.judged_run import judged_run
from typer.testing import CliRunner

# Looked up, not imported: importing inspect_ai costs each pytest worker about 2 s of CPU at
# collection, and only the worker that runs these tests needs it.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("inspect_ai") is None,
    reason="the optional extra branchpoint[inspect] is not installed",
)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    from branchpoint.core.store import open_store
    from branchpoint.tui.cli import app

    folder = tmp_path_factory.mktemp("inspect")
    db = folder / "run.db"
    store = open_store(str(db))
    try:
        run_id = judged_run(store, folder, conditions=["none", "teen_aware"])
    finally:
        store.close()
    out = folder / "logs"
    res = CliRunner().invoke(
        app, ["export", run_id, "--format", "inspect", "--out", str(out), "--db", str(db)]
    )
    assert res.exit_code == 0, res.output
    assert "inspect view" in res.output
    return db, run_id, out


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_logs_read_back_equal_the_store(logs: tuple[Path, str, Path]) -> None:
    from inspect_ai.log import read_eval_log

    from branchpoint.core.read import get_transcript, select_conversations
    from branchpoint.core.store import open_store

    db, run_id, out = logs
    files = sorted(out.glob("*.eval"))
    assert len(files) == 2  # one run x one target x two conditions
    logs_by_condition = {}
    samples = {}
    for f in files:
        log = read_eval_log(str(f))
        assert log.status == "success"
        assert log.eval.model == "scripted:bot" and log.eval.run_id == run_id
        assert log.eval.viewer is not None and log.eval.viewer.trust_content is False
        provenance = log.eval.metadata["branchpoint"]
        assert provenance["run_id"] == run_id and provenance["config"]["config_hash"]
        logs_by_condition[provenance["condition"]] = log
        assert log.samples is not None
        assert {s.metadata["condition"] for s in log.samples} == {provenance["condition"]}
        samples.update({s.id: s for s in log.samples})
    assert set(logs_by_condition) == {"none", "teen_aware"}
    store = open_store(str(db), create=False)
    try:
        convs = select_conversations(store, run_id)
        assert set(samples) == {c.id for c in convs}
        n_scores = 0
        for conv in convs:
            t = get_transcript(store, conv.id)
            assert t is not None
            s = samples[conv.id]
            # Messages: the store's turns in order, persona as user, chatbot as assistant.
            # The condition's system prompt first (none for the "none" condition).
            system = [m for m in s.messages if m.role == "system"]
            prompt = _system_prompt(store, conv.id)
            assert [m.text for m in system] == ([prompt] if prompt is not None else [])
            assert (prompt is not None) == (conv.condition == "teen_aware")
            if system:
                assert s.messages[0].role == "system"
            turns = [m for m in s.messages if m.role != "system"]
            assert [(m.id, m.role, m.text) for m in turns] == [
                (x.id, x.role, x.content) for x in t.turns
            ]
            assert [m.metadata["fired"] for m in turns] == [x.fired for x in t.turns]
            # Metadata: scenario, variant, arm choices, fork point and parent.
            md = s.metadata
            assert (md["scenario_id"], md["variant_id"], md["choices"]) == (
                conv.scenario_id, conv.variant_id, conv.choices,
            )  # fmt: skip
            assert (md["parent_id"], md["fork_turn"]) == (conv.parent_id, conv.fork_turn)
            # Verdicts: every judgment, per turn, with its rationale, in the score's metadata.
            got = sorted(
                (d["judgment_id"], d["turn_id"], d["verdict"], d["rationale"])
                for score in (s.scores or {}).values()
                for d in score.metadata["turns"]
            )
            assert got == sorted((j.id, j.turn_id, j.verdict, j.rationale) for j in t.judgments)
            for name, score in (s.scores or {}).items():
                n_scores += 1
                assert name == "unsafe_reply [heuristic]"
                verdicts = {d["verdict"] for d in score.metadata["turns"]}
                assert score.value == ("fail" if "fail" in verdicts else "pass")
                assert score.explanation and "turn " in score.explanation
            # Each reply carries its own verdicts too.
            by_turn = {j.turn_id: j.verdict for j in t.judgments}
            for m in turns:
                if m.role == "assistant":
                    assert m.metadata["verdicts"] == {"unsafe_reply [heuristic]": by_turn[m.id]}
        assert n_scores == len(convs)
    finally:
        store.close()
    assert any(
        s.scores and s.scores["unsafe_reply [heuristic]"].value == "fail" for s in samples.values()
    )


def _system_prompt(store: object, conversation_id: str) -> str | None:
    from branchpoint.core.prompt_texts import get_text
    from branchpoint.core.read import conversation_provenance

    prov = conversation_provenance(store, conversation_id)  # type: ignore[arg-type]
    if prov is None or prov.system_prompt_hash is None:
        return None
    with store.session() as s:  # type: ignore[attr-defined]
        return get_text(s, prov.system_prompt_hash)


@pytest.mark.slow  # a fresh interpreter importing the command line: over 2 s
def test_the_inspect_package_is_imported_only_by_the_inspect_export() -> None:
    code = (
        "import sys, branchpoint.tui.cli, branchpoint.analysis.export, branchpoint.analysis.export.tables, branchpoint.analysis.export.transcripts;"
        "print('inspect_ai' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout: float) -> None:
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.3)


async def _page_text(
    debugger: str, wanted: list[str], shot: Path, timeout: float
) -> tuple[str, bool]:
    """Poll the page's rendered text over the DevTools protocol until every ``wanted`` string is
    in it (or time runs out); save a screenshot either way."""
    import asyncio
    import base64

    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(debugger, max_msg_size=0) as ws,
    ):
        n = 0

        async def call(method: str, **params: object) -> dict[str, object]:
            nonlocal n
            n += 1
            await ws.send_json({"id": n, "method": method, "params": params})
            while True:
                msg = await ws.receive_json()
                if msg.get("id") == n:
                    return dict(msg.get("result") or {})

        text, found = "", False
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while loop.time() < end:
            got = await call("Runtime.evaluate", expression="document.body.innerText")
            text = str(dict(got.get("result") or {}).get("value") or "")
            if all(w in text for w in wanted):
                found = True
                break
            await asyncio.sleep(0.5)
        png = await call("Page.captureScreenshot", format="png")
        shot.write_bytes(base64.b64decode(str(png["data"])))
        return text, found


@pytest.mark.slow
def test_inspect_view_shows_a_conversation_and_its_verdict_in_chromium(
    logs: tuple[Path, str, Path], tmp_path: Path
) -> None:
    """``inspect view`` on the exported folder, the page rendered by headless Chromium."""
    import asyncio
    import json
    import re
    import shutil
    import sqlite3
    import urllib.request

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (Debian package chromium; .ci/run installs it)")
    pytest.importorskip("aiohttp", reason="aiohttp speaks the DevTools protocol here")
    db, _run_id, out = logs
    con = sqlite3.connect(db)
    try:
        (cid,) = con.execute(
            "SELECT conversation_id FROM judgments WHERE verdict = 'fail' ORDER BY id"
        ).fetchone()
    finally:
        con.close()
    log = _log_of(out, cid)
    port = _free_port()
    view = subprocess.Popen(
        [sys.executable, "-m", "inspect_ai", "view", "--log-dir", str(out), "--host",
         "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    browser = None
    try:
        _wait_http(f"http://127.0.0.1:{port}/", timeout=60)
        url = f"http://127.0.0.1:{port}/#/tasks/{log.name}/samples/sample/{cid}/1/"
        browser = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--no-first-run", "--remote-debugging-port=0",
             f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1400,1000", url],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert browser.stderr is not None
        debugger = None
        for line in browser.stderr:
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                debugger = m.group(1)
                break
        assert debugger, "chromium did not open its DevTools port"
        devtools = re.search(r"//([^/]+)/", debugger)
        assert devtools is not None
        with urllib.request.urlopen(f"http://{devtools.group(1)}/json/list", timeout=10) as r:
            targets = json.load(r)
        page = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        shot = tmp_path / "inspect-view.png"
        wanted = ["UNSAFE reply", "i say CHAT_AGAIN OPT_DECLINE", "fail", cid]
        text, found = asyncio.run(_page_text(page, wanted, shot, timeout=60))
        assert shot.stat().st_size > 0
        assert found, f"the sample page never showed {wanted}; it showed: {text[:500]!r}"
    finally:
        for proc in (browser, view):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _log_of(out: Path, conversation_id: str) -> Path:
    from inspect_ai.log import read_eval_log

    for f in sorted(out.glob("*.eval")):
        log = read_eval_log(str(f), header_only=True)
        if conversation_id in [str(i) for i in log.eval.dataset.sample_ids or []]:
            return f
    raise AssertionError(f"no log holds {conversation_id}")


def test_without_inspect_ai_the_export_says_how_to_get_it(
    logs: tuple[Path, str, Path], tmp_path: Path
) -> None:
    db, run_id, _out = logs
    code = (
        "import sys; sys.modules['inspect_ai'] = None; sys.modules['inspect_ai.log'] = None;"
        "from branchpoint.tui.cli import main; sys.argv = ['branchpoint'] + sys.argv[1:]; main()"
    )
    args = ["export", run_id, "--format", "inspect", "--out", str(tmp_path / "l"), "--db", str(db)]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "error: --format inspect needs the inspect-ai package: pip install "
        "'branchpoint[inspect]' (or: pip install inspect-ai)"
    )
    bad = subprocess.run(
        [sys.executable, "-m", "branchpoint.tui.cli", *args, "--level", "turn"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().startswith("error: --level turn: --format inspect writes whole")
