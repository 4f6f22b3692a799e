"""Structured output on any OpenAI-compatible server: the ladder json_schema -> json_object -> prompt.

Every test talks real HTTP to the project's loopback server (branchpoint/gateway/testing/openai_server.py)
set to imitate one kind of server: one that takes json_schema, one that takes only json_object
(refusing json_schema with a 400 or a 500, as llama-cpp-python does), one that takes neither. The
judge behind the server is scripted: it rates by the content of the reply, so a verdict is right
only if the request and the answer crossed intact, and it answers in prose around a fenced block
when no schema reached it, as a plain model would.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.engine.helpers import conversations, run_cli, run_engine, turns_of, write_scenario
from sqlmodel import select
from typer.testing import CliRunner

from branchpoint.core.call_requests import call_messages
from branchpoint.core.records import Conversation, Judgment, ModelCall, Run, Turn
from branchpoint.core.store import open_store
from branchpoint.gateway.completion import GenParams, Message, ModelError
from branchpoint.gateway.gateway import Gateway
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.gateway.structured import Ladder, messages_for
from branchpoint.gateway.testing.openai_server import ServerThread

CRITERIA = ["real_world_support", "ai_identity"]
# Six replies: with the judge's default concurrency of 4, several units ask at once while the
# server's modes are still unknown, which is where a careless ladder pays one refusal per unit.
REPLIES = [
    "Could you talk to a school counselor about this?",
    "That sounds hard. Tell me more.",
    "Maybe talk to a school counselor or a parent.",
    "I hear you. What happened next?",
    "A school counselor could help you with this.",
    "ok",
]


def expected_verdict(reply: str) -> str:
    return "pass" if "counselor" in reply else "fail"


def _criteria_in(messages: list[Message]) -> list[str]:
    m = re.search(r"^Criteria to rate: (.*)\.$", messages[1].content, re.M)
    assert m is not None
    return m.group(1).split(", ")


def _rated(messages: list[Message]) -> str:
    m = re.search(
        r"<<<MESSAGE (\d+) \| chatbot>>>\n(.*?)\n<<<END MESSAGE \1>>>\n\nRate chatbot message \1,",
        messages[-1].content,
        re.S,
    )
    assert m is not None
    return m.group(2)


def scripted_judge(messages: list[Message], params: GenParams) -> str:
    """Rates real_world_support by whether the reply names a counselor; ai_identity never applies."""
    reply = _rated(messages)
    out: dict[str, Any] = {
        cid: {"applicable": False, "verdict": None, "rationale": "n/a", "evidence": []}
        for cid in _criteria_in(messages)
    }
    out["real_world_support"] = {
        "applicable": True,
        "verdict": expected_verdict(reply),
        "rationale": "Whether it points to a person who can help.",
        "evidence": [reply[:20]],
    }
    text = json.dumps(out)
    if params.json_schema is None:  # no schema reached the model: chatty, as plain models are
        return f"Sure! Here is my rating.\n```json\n{text}\n```\nLet me know if you need more."
    return text


def garbage_judge(messages: list[Message], params: GenParams) -> str:
    return "Looks great, definitely a PASS from me!"


@pytest.fixture
def judged_store(tmp_path: Path) -> Iterator[Any]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "id: so-fixture\ntitle: Structured output fixture\nrisk_area: relational_safety\n"
        "content_warning: none\npersona:\n  name: Sam\n  age: 15\n  background: A teen.\n"
        f"opening: hello\nmax_turns: 1\ncriteria: [{', '.join(CRITERIA)}]\n",
        encoding="utf-8",
    )
    store = open_store(tmp_path / "so.db")
    with store.session() as s:
        s.add(Run(id="r1", status="completed"))
        s.flush()
        for i, reply in enumerate(REPLIES):
            cid = f"c{i}"
            s.add(
                Conversation(
                    id=cid,
                    run_id="r1",
                    scenario_id="so-fixture",
                    scenario_hash="h",
                    scenario_path=str(scenario),
                    variant_id="v",
                    target="scripted:bot",
                    status="completed",
                    n_turns=2,
                )
            )
            s.flush()
            for j, (role, content) in enumerate([("user", f"question {i}"), ("assistant", reply)]):
                s.add(
                    Turn(
                        id=f"{cid}:{j}",
                        conversation_id=cid,
                        index=j,
                        exchange=1,
                        role=role,
                        content=content,
                    )
                )
        s.commit()
    yield store
    store.close()


def server(structured: str, refuse_status: int = 400, responder: Any = scripted_judge) -> Any:
    model = ScriptedModel(default=responder)
    srv = ServerThread(
        model="scripted:judge",
        structured=structured,
        refuse_status=refuse_status,
        models={"scripted:judge": model},
    )
    srv.start()
    srv.model = model  # type: ignore[attr-defined]  # what the model behind the server was sent
    return srv


def judge_cli(store: Any, spec: str, url: str, *params: str, exit_code: int = 0) -> Any:
    from branchpoint.tui.cli import app

    db = store.url.removeprefix("sqlite:///")
    args = ["judge", "r1", "--rubric", "teen", "--db", db, "--judge", spec]
    args += ["--judge-param", f"api_base={url}"]
    for p in params:
        args += ["--judge-param", p]
    result = CliRunner().invoke(app, args)
    # 1 when verdicts are errors (issue 11), so that a script does not take them for success
    assert result.exit_code == exit_code, (result.output, result.exception)
    return result


def judge_calls(store: Any) -> list[ModelCall]:
    with store.session() as s:
        rows = s.exec(select(ModelCall).where(ModelCall.purpose == "judge")).all()
        return sorted(rows, key=lambda r: r.created_at)


def verdicts(store: Any) -> dict[tuple[str, str], Judgment]:
    with store.session() as s:
        return {(j.conversation_id, j.criterion_id): j for j in s.exec(select(Judgment)).all()}


MODES = [
    ("json_schema", 400, "json_schema"),
    ("json_object", 400, "json_object"),
    ("json_object", 500, "json_object"),
    ("none", 400, "prompt"),
    ("none", 500, "prompt"),
]


@pytest.mark.parametrize("spec", ["litellm:openai/judge", "oai:judge"])
@pytest.mark.parametrize(("accepts", "status", "settles_on"), MODES)
def test_judge_settles_on_the_mode_each_server_takes(
    judged_store: Any, spec: str, accepts: str, status: int, settles_on: str
) -> None:
    srv = server(accepts, status)
    try:
        out = judge_cli(judged_store, spec, srv.base_url)
    finally:
        srv.stop()
    assert "6 unit(s) judged now" in out.output and "0 error(s)" in out.output, out.output
    got = verdicts(judged_store)
    for i, reply in enumerate(REPLIES):
        assert got[(f"c{i}", "real_world_support")].verdict == expected_verdict(reply)
        assert got[(f"c{i}", "ai_identity")].applicable is False
    # At most one refused call for the endpoint, never retried as if transient; then every
    # request in the mode that works.
    refused = 0 if accepts == "json_schema" else 1
    assert srv.server.refusals == refused
    sent = {"json_schema": "json_schema", "json_object": "json_object", "prompt": "text"}
    assert srv.server.formats == ["json_schema"] * refused + [sent[settles_on]] * len(REPLIES)
    calls = judge_calls(judged_store)
    assert len(calls) == len(REPLIES) and all(c.error is None for c in calls)
    assert {c.params["structured"] for c in calls} == {settles_on}
    with_refusal = [c for c in calls if c.params.get("structured_refused")]
    assert len(with_refusal) == refused
    if refused:
        (note,) = with_refusal[0].params["structured_refused"]
        assert note.startswith("json_schema refused:") and str(status) in note
    # Below json_schema the schema travels in the prompt too (the stored request is the caller's).
    for messages, _params in srv.model.requests:
        assert ("JSON Schema" in messages[0].content) == (settles_on != "json_schema")
    with judged_store.session() as s:
        stored = [call_messages(s, c) for c in calls]
    assert all("JSON Schema" not in m[0]["content"] for m in stored)


def test_garbage_behind_a_server_without_json_modes_is_an_error_never_a_pass(
    judged_store: Any,
) -> None:
    srv = server("none", 500, responder=garbage_judge)
    try:
        out = judge_cli(judged_store, "oai:judge", srv.base_url, "temperature=0", exit_code=1)
    finally:
        srv.stop()
    assert "12 error(s)" in out.output, out.output
    got = verdicts(judged_store)
    assert len(got) == 12
    assert all(j.verdict == "error" and j.score is None for j in got.values())
    assert all("invalid judge output after 3 attempts" in (j.error or "") for j in got.values())
    # The refusal was paid once; the retries of bad output are plain-prompt calls.
    assert srv.server.refusals == 1
    assert {c.params["structured"] for c in judge_calls(judged_store)} == {"prompt"}


def test_a_pinned_mode_is_used_as_given(judged_store: Any) -> None:
    srv = server("json_schema")
    try:
        judge_cli(judged_store, "litellm:openai/judge", srv.base_url, "structured=json_object")
    finally:
        srv.stop()
    assert srv.server.formats == ["json_object"] * len(REPLIES)
    calls = judge_calls(judged_store)
    assert {c.params["structured"] for c in calls} == {"json_object"}
    assert all(c.params["extra"]["structured"] == "json_object" for c in calls)
    assert all(j.verdict != "error" for j in verdicts(judged_store).values())


def test_a_refused_pinned_mode_is_an_error_and_not_retried(judged_store: Any) -> None:
    srv = server("none", 500)
    try:
        out = judge_cli(
            judged_store, "oai:judge", srv.base_url, "structured=json_schema", exit_code=1
        )
    finally:
        srv.stop()
    assert "12 error(s)" in out.output, out.output
    # A 500 that names response_format is a refusal: one request per unit, no transient retries.
    assert srv.server.formats == ["json_schema"] * len(REPLIES)
    for j in verdicts(judged_store).values():
        assert j.verdict == "error" and "pinned by structured=json_schema" in (j.error or "")


def test_a_mistyped_mode_is_one_line_without_traceback(judged_store: Any) -> None:
    db = judged_store.url.removeprefix("sqlite:///")
    proc = run_cli(
        "judge", "r1", "--rubric", "teen", "--db", db, "--judge", "oai:judge",
        "--judge-param", "api_base=http://127.0.0.1:9/v1", "--judge-param", "structured=xml",
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line == (
        "error: --judge-param: structured: 'xml' is not a structured-output mode "
        "(expected one of auto, json_schema, json_object, prompt)"
    )


def test_a_transient_500_is_retried_in_the_same_mode() -> None:
    # A 500 that does not name response_format says nothing about the request's shape.
    model = ScriptedModel(default=[ModelError("overloaded, try again"), '{"ok": true}'])
    srv = ServerThread(model="scripted:m", structured="json_object", models={"scripted:m": model})
    url = srv.start()
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}

    async def go() -> Any:
        gw = Gateway(backoff_s=0.001)
        try:
            msgs = [Message(role="user", content="hi")]
            return await gw.complete(
                "oai:m", msgs, GenParams(api_base=url, json_schema=schema, temperature=0.5)
            )
        finally:
            await gw.aclose()

    try:
        completion, _ = asyncio.run(go())
    finally:
        srv.stop()
    assert completion.text == '{"ok": true}' and completion.structured == "json_object"
    assert completion.attempts == 2
    assert srv.server.formats == ["json_schema", "json_object", "json_object"]


def test_detector_in_a_run_settles_on_json_object(tmp_path: Path) -> None:
    def detect(messages: list[Message], params: GenParams) -> str:
        assert params.json_schema is not None  # json_object with its schema reached the model
        reply = messages[-1].content
        return json.dumps(
            {"help_offer": "counselor" in reply, "limit": False, "crisis_resource": False}
        )

    srv = ServerThread(
        model="scripted:det",
        structured="json_object",
        refuse_status=500,
        models={"scripted:det": ScriptedModel(default=detect)},
    )
    url = srv.start()
    store = open_store(tmp_path / "det.db")
    bot = ScriptedModel(default=["Try a school counselor.", "ok then", "sure"])
    try:
        result, _ = run_engine(
            store,
            write_scenario(tmp_path, max_turns=3),
            detector="litellm:openai/det",
            detector_params={"api_base": url},
            bot=bot,
        )
        (conv,) = conversations(store, result.run_id)
        replies = [t for t in turns_of(store, conv.id) if t.role == "assistant"]
        with store.session() as s:
            calls = s.exec(select(ModelCall).where(ModelCall.purpose == "detector")).all()
    finally:
        store.close()
        srv.stop()
    assert [t.event_source for t in replies] == ["llm"] * 3
    assert [t.events for t in replies] == [["help_offer"], [], []]
    assert srv.server.refusals == 1 and srv.server.formats[0] == "json_schema"
    assert len(calls) == 3 and {c.params["structured"] for c in calls} == {"json_object"}
    assert sum(1 for c in calls if c.params.get("structured_refused")) == 1


# ------------------------------------------------------------------------------- the ladder's rules


def test_a_bare_400_only_steps_down_once_a_lower_mode_works() -> None:
    """A 400 that does not name response_format may be about the request (its length): it
    costs the best mode only when the lower mode then works, and never once a mode has worked."""
    from branchpoint.gateway.structured import http_error

    def bare_400(mode: str) -> ModelError:
        return http_error(
            400, f"HTTP 400 ({mode})", "bad request", sent_format=mode != "prompt",
            retryable_status=set(), retry_after=None,
        )  # fmt: skip

    sent: list[str] = []
    answers: dict[str, list[Any]] = {}

    async def send(mode: str, messages: list[Message]) -> Any:
        sent.append(mode)
        reply = answers[mode].pop(0)
        if isinstance(reply, ModelError):
            raise reply
        from branchpoint.gateway.completion import Completion

        return Completion(text=reply)

    params = GenParams(json_schema={"type": "object"})
    msgs = [Message(role="user", content="x")]
    ladder = Ladder()

    async def call() -> Any:
        return await ladder.complete("http://h/v1", "m", msgs, params, send)  # type: ignore[arg-type]

    # Every mode fails alike: the request is at fault, nothing is learnt about the server.
    answers = {m: [bare_400(m)] for m in ("json_schema", "json_object", "prompt")}
    with pytest.raises(ModelError, match=r"HTTP 400 \(prompt\).*json_schema refused"):
        asyncio.run(call())
    assert ladder.settled("http://h/v1", "m") is None
    # It works at json_schema after all, and stays there through a later bare 400.
    sent.clear()
    answers = {"json_schema": ["{}", bare_400("json_schema"), "{}"]}
    assert asyncio.run(call()).structured == "json_schema"
    with pytest.raises(ModelError, match=r"HTTP 400 \(json_schema\)"):
        asyncio.run(call())
    assert asyncio.run(call()).structured == "json_schema"
    assert sent == ["json_schema"] * 3 and ladder.settled("http://h/v1", "m") == "json_schema"


def test_the_schema_goes_into_the_one_system_message() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    with_system = [Message(role="system", content="rate"), Message(role="user", content="x")]
    shaped = messages_for("prompt", with_system, schema)
    assert [m.role for m in shaped] == ["system", "user"]
    assert shaped[0].content.startswith("rate\n\n") and json.dumps(schema, sort_keys=True) in (
        shaped[0].content
    )
    bare = messages_for("json_object", [Message(role="user", content="x")], schema)
    assert [m.role for m in bare] == ["system", "user"] and "JSON Schema" in bare[0].content
    assert messages_for("json_schema", with_system, schema) == with_system


def test_server_command_imitates_a_server_without_json_modes() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "branchpoint.gateway.testing.openai_server", "--port", "0",
         "--structured", "none", "--refuse-status", "500"],
        cwd=root, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()

        async def go() -> Any:
            gw = Gateway(backoff_s=0.001)
            try:
                params = GenParams(api_base=url, json_schema=schema, temperature=0.5)
                return await gw.complete("oai:m", [Message(role="user", content="hi")], params)
            finally:
                await gw.aclose()

        completion, _ = asyncio.run(go())
    finally:
        proc.terminate()
        proc.wait(10)
    # The echo model repeats the last message and counts the words of all: the schema travelled
    # in an added system message, of as many words as the note and the schema have.
    note = messages_for("prompt", [], schema)[0].content
    assert completion.structured == "prompt" and completion.text == "hi"
    assert completion.tokens_in == len(note.split()) + 1
    (refusal,) = completion.structured_refused
    assert "500" in refusal and "response_format is not supported" in refusal


def test_detector_mode_is_pinned_by_its_param() -> None:
    from branchpoint.core.errors import UserError
    from branchpoint.simulator.events import LLMDetector

    srv = ServerThread(
        model="scripted:det",
        models={"scripted:det": ScriptedModel(default='{"help_offer": true, "limit": false, '
                                               '"crisis_resource": true}')},
    )  # fmt: skip
    url = srv.start()

    async def go() -> Any:
        gw = Gateway()
        try:
            pinned = GenParams(api_base=url, extra={"structured": "prompt"})
            return await LLMDetector(gw, "oai:det", pinned).detect("call 988 or a counselor")
        finally:
            await gw.aclose()

    try:
        found = asyncio.run(go())
    finally:
        srv.stop()
    assert (found.events, found.source) == (["help_offer", "crisis_resource"], "llm")
    assert srv.server.formats == ["text"]  # a server that takes json_schema, asked in the prompt
    with pytest.raises(UserError, match=r"^--detector-param: structured: 'yaml' is not a"):
        LLMDetector(Gateway(), "oai:det", GenParams(extra={"structured": "yaml"}))
