"""Every judge prompt stored once (issue 45): a judge call's row holds its system prompt and
criteria by hash, its transcript as a reference to the stored turns and its output schema by
hash, a few hundred bytes; and its request is rebuilt from them byte for byte as the server
received it."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import orjson
from sqlmodel import select

from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store
from branchpoint.core.call_requests import call_messages, call_params
from branchpoint.core.records import ModelCall, PromptText
from branchpoint.core.store import open_store
from branchpoint.gateway.completion import GenParams, Message
from branchpoint.gateway.gateway import Gateway
from branchpoint.gateway.providers.oai import OpenAICompatProvider
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.gateway.testing.openai_server import ServerThread
from branchpoint.judges.runner import ajudge_run

ASKED = re.compile(r"^Criteria to rate: (.*)\.$", re.M)


def _judge_reply(messages: list[Message], params: GenParams) -> str:
    found = ASKED.search(messages[-1].content)
    assert found is not None, "the request names the criteria to rate"
    return json.dumps(
        {
            c: {"applicable": False, "verdict": None, "rationale": "r", "evidence": []}
            for c in found.group(1).split(", ")
        }
    )


def test_judge_calls_store_references_and_rebuild_the_request_byte_for_byte(
    tmp_path: Path,
) -> None:
    db = tmp_path / "teen.db"
    design = TeenDesign(n_scenarios=2, targets=("scripted:a",), n_exchanges=4)
    write_teen_store(db, design, seed=1)
    srv = ServerThread(
        "scripted:judge", models={"scripted:judge": ScriptedModel(default=_judge_reply)},
        keep_bodies=True,
    )  # fmt: skip
    srv.start()
    store = open_store(db)
    try:
        gw = Gateway(store=store, cache=False)

        async def judge() -> Any:
            try:
                return await ajudge_run(
                    None, store=store, gateway=gw, all_runs=True, judges=["oai:judge"],
                    params=GenParams(api_base=srv.base_url),
                )  # fmt: skip
            finally:
                await gw.aclose()

        summary = asyncio.run(judge())
        assert summary.errors == 0 and summary.model_calls > 10
        assert srv.server is not None and srv.server.bodies is not None
        received = {bytes(b) for b in srv.server.bodies}
        with store.session() as s:
            calls = s.exec(select(ModelCall).where(ModelCall.purpose == "judge")).all()
            assert len(calls) == summary.model_calls
            provider = OpenAICompatProvider()
            for call in calls:
                # what the row holds: references, no copy of the prompt, the schema by hash
                assert call.messages == [] and call.prompt is not None
                assert "json_schema" not in call.params and "json_schema_ref" in call.params
                stored = len(orjson.dumps(call.messages)) + len(orjson.dumps(call.prompt))
                stored += len(orjson.dumps(call.params))
                assert stored <= 1024, (stored, call.prompt, call.params)
                user = call.prompt[1]
                assert any("transcript" in piece for piece in user["pieces"])
                # the request rebuilt from the store is the one the server received
                messages = [Message(**m) for m in call_messages(s, call)]
                params = call_params(s, call)
                gen = GenParams(**{k: v for k, v in params.items() if k in GenParams.model_fields})
                body = provider.payload("judge", messages, gen, params["structured"])
                assert body in received, call.id
            # the system prompt is one text for every call of the rubric, the schema one per
            # set of criteria
            systems = {c.prompt[0]["text"] for c in calls}
            assert len(systems) == 1
            texts = s.exec(select(PromptText)).all()
            assert len({t.hash for t in texts}) == len(texts)
    finally:
        store.close()
        srv.stop()
