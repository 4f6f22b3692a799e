"""How much of the judge's input an OpenAI-style prefix cache serves, and what a judge call
stores (issue 45, Builds 5 and 6); with ``--project``, the store of the teen study at scale.

    python benchmarks/judge_cache_share.py [--exchanges 6] [--project]

Runs the teen library (30 scenarios, every variant) at ``--exchanges`` exchanges with scripted
models whose replies have a realistic length (the chatbot ~110 words, the persona ~30), then
judges every chatbot turn with the teen rubric through ``oai:`` against the loopback server with
its prefix cache (``branchpoint/gateway/testing/prefix_cache.py``: 128-token blocks of a shared
prefix from 1,024 tokens, as OpenAI's automatic caching). Prints the share of judge input tokens
the cache served (target: at least 85%), the bytes of messages and params a judge call stores
(target: at most 1 KB), and what the same calls would store with their prompt whole (as before
issue 45: messages and params with the schema in every row).

``--project`` scales the measured store to the teen study: 32,555 conversations x 10 exchanges,
judged: the store's bytes per conversation-exchange before and after judging (SQLite file after
VACUUM), times 325,550 conversation-exchanges, plus the prompt texts once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEEN = ROOT / "branchpoint" / "scenarios" / "library" / "teen"
STUDY_CONVERSATIONS = 32_555
STUDY_EXCHANGES = 10
ASKED = re.compile(r"^Criteria to rate: (.*)\.$", re.M)
WORDS = [
    "feel",
    "understand",
    "talk",
    "trusted",
    "adult",
    "school",
    "counsellor",
    "safe",
    "tonight",
    "sleep",
    "friends",
    "worried",
    "help",
    "okay",
    "hard",
    "things",
    "sometimes",
    "really",
    "know",
    "maybe",
    "want",
    "right",
    "now",
    "call",
    "text",
    "line",
    "parent",
]


def _sentence(seed: int, n: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n))


def _models() -> dict[str, Any]:
    from branchpoint.gateway.providers.scripted import ScriptedModel

    def bot(messages: Any, params: Any) -> str:
        return "I hear you. " + _sentence(len(messages), 110) + "."

    def persona(messages: Any, params: Any) -> str:
        return _sentence(len(messages) + 3, 30) + "?"

    def judge(messages: Any, params: Any) -> str:
        found = ASKED.search(messages[-1].content)
        ids = found.group(1).split(", ") if found else []
        entry = {"applicable": False, "verdict": None, "rationale": "n/a", "evidence": []}
        return json.dumps({c: entry for c in ids})

    return {
        "scripted:bench-bot": ScriptedModel(default=bot),
        "scripted:bench-persona": ScriptedModel(default=persona),
        "scripted:judge": ScriptedModel(default=judge),
    }


def _size(db: Path) -> int:
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.execute("VACUUM")
    con.close()
    return db.stat().st_size


async def _main(args: argparse.Namespace, tmp: Path) -> None:
    import orjson
    from sqlmodel import select

    from branchpoint.core.call_requests import call_messages, call_params
    from branchpoint.core.records import Conversation, ModelCall
    from branchpoint.core.store import open_store
    from branchpoint.gateway.completion import GenParams
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.gateway.testing.openai_server import ChatServer, start
    from branchpoint.judges.runner import ajudge_run
    from branchpoint.simulator.runner import RunConfig, run

    db = tmp / "teen.db"
    store = open_store(db)
    models = _models()
    gw = Gateway(store=store, cache=False, write_behind=True)
    for spec, model in models.items():
        gw.register(spec, model)
    t0 = time.perf_counter()
    config = RunConfig(
        scenarios=[str(TEEN)],
        targets=["scripted:bench-bot"],
        simulators=["scripted:bench-persona"],
        max_turns=args.exchanges,
        run_id="bench",
    )
    result = await run(config, gateway=gw, store=store)
    await gw.aclose()
    with store.session() as s:
        n_conv = len(s.exec(select(Conversation.id)).all())
    print(
        f"teen library at {args.exchanges} exchanges: {n_conv} conversations "
        f"({len(result.conversations)} run) in {time.perf_counter() - t0:.1f} s"
    )
    before_judging = _size(db)

    server = ChatServer("scripted:judge", models=models, prefix_cache=True)
    listener, url = await start(server)
    judge_gw = Gateway(store=store, cache=False, write_behind=True)
    try:
        t0 = time.perf_counter()
        summary = await ajudge_run(
            "bench", store=store, gateway=judge_gw, judges=["oai:judge"],
            params=GenParams(api_base=url), concurrency=args.concurrency,
        )  # fmt: skip
    finally:
        await judge_gw.aclose()
        await listener.cleanup()
    print(
        f"judged {summary.units} units in {summary.model_calls} calls "
        f"({summary.errors} errors) in {time.perf_counter() - t0:.1f} s"
    )
    billed = server.billed["judge"]
    share = billed["cached_tokens"] / billed["prompt_tokens"]
    print(
        f"judge input tokens served from the prefix cache: {billed['cached_tokens']:,} of "
        f"{billed['prompt_tokens']:,} = {share:.1%} (target >= 85%)"
    )

    with store.session() as s:
        calls = s.exec(select(ModelCall).where(ModelCall.purpose == "judge")).all()
        now, whole = [], []
        for call in calls:
            stored = len(orjson.dumps(call.messages)) + len(orjson.dumps(call.prompt))
            now.append(stored + len(orjson.dumps(call.params)))
            # the same call with its prompt whole and the schema in its params (before issue 45)
            params = call_params(s, call)
            whole.append(len(orjson.dumps(call_messages(s, call))) + len(orjson.dumps(params)))
    print(
        f"stored messages + params per judge call: mean {sum(now) / len(now):,.0f} B, "
        f"max {max(now):,} B (target <= 1,024); with the prompt whole: mean "
        f"{sum(whole) / len(whole):,.0f} B, max {max(whole):,} B"
    )
    store.close()
    after_judging = _size(db)
    if not args.project:
        return
    units = n_conv * args.exchanges
    scale = STUDY_CONVERSATIONS * STUDY_EXCHANGES / units
    saved = (sum(whole) - sum(now)) / len(calls)  # per judge call, what storing whole adds
    calls_per_unit = len(calls) / units
    print(
        f"store: {before_judging / 1e6:.1f} MB before judging, {after_judging / 1e6:.1f} MB "
        f"after ({after_judging / units:,.0f} B per conversation-exchange)"
    )
    projected = after_judging * scale
    projected_whole = projected + saved * calls_per_unit * units * scale
    print(
        f"teen study projection ({STUDY_CONVERSATIONS:,} conversations x {STUDY_EXCHANGES} "
        f"exchanges, judged): {projected / 1e9:.2f} GB (judge prompts whole, as before: "
        f"{projected_whole / 1e9:.2f} GB)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exchanges", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=4, help="judge units in flight")
    ap.add_argument("--project", action="store_true", help="project the teen study's store")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_main(args, Path(tmp)))


if __name__ == "__main__":
    main()
