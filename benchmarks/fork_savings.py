"""Model calls saved by prefix-sharing forks: ``fork: shared`` vs ``fork: independent``.

    .venv/bin/python benchmarks/fork_savings.py [--scenarios branchpoint/scenarios/library/teen] [--max-turns 20]

Runs every variant of the bundled teen library (falls back to the engine test fixtures if the
library is absent) against a scripted chatbot whose replies trigger the branch-point events (a help
offer in exchange 3, a limit in exchange 5; --help-at/--limit-at move them) and a scripted persona,
once with every tree shared and once with every arm independent, on a real SQLite store. Prints the model calls of each and their
ratio. The scripted models cost nothing, so the call counts are the whole story: with real models
the saving in tokens, money and time is the same ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from branchpoint.gateway.completion import GenParams, Message  # noqa: E402
from branchpoint.gateway.providers.scripted import ScriptedModel  # noqa: E402
from branchpoint.scenarios.bundled import LIBRARY  # noqa: E402

HELP_AT, LIMIT_AT = (
    3,
    5,
)  # exchanges at which the chatbot offers help / sets a limit (--help-at, --limit-at)


def bot_reply(messages: list[Message], params: GenParams) -> str:
    exchange = sum(1 for m in messages if m.role == "user")
    if exchange == HELP_AT:
        return "That sounds like a lot. Could you talk to a school counselor or a trusted adult about it?"
    if exchange == LIMIT_AT:
        return "I can't help with that part, but I'm still here to talk."
    return "That sounds hard. What happened next?"


def persona_reply(messages: list[Message], params: GenParams) -> str:
    # Depends on the instructions in force, so arms on different options say different things.
    digest = hashlib.sha256(messages[0].content.encode()).hexdigest()[:8]
    return f"message {len(messages)} ({digest})"


async def one(
    paths: list[str], fork: str, max_turns: int, db: Path
) -> tuple[dict[str, int], int, float]:
    from branchpoint.core.store import open_store
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.simulator.runner import RunConfig, run

    store = open_store(db)
    gw = Gateway(store=store, cache=False)
    gw.register("scripted:bench-persona", ScriptedModel(default=persona_reply))
    gw.register("scripted:bench-bot", ScriptedModel(default=bot_reply))
    started = time.perf_counter()
    result = await run(
        RunConfig(
            scenarios=paths,
            targets=["scripted:bench-bot"],
            simulator="scripted:bench-persona",
            fork=fork,
            max_turns=max_turns,
            concurrency=64,
        ),  # type: ignore[arg-type]
        gateway=gw,
        store=store,
    )
    elapsed = time.perf_counter() - started
    await gw.aclose()
    store.close()
    return {**result.calls, "total": result.total_calls}, len(result.conversations), elapsed


def main() -> None:
    global HELP_AT, LIMIT_AT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=str(LIBRARY / "teen"))
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument(
        "--help-at", type=int, default=3, help="exchange of the chatbot's help offer"
    )
    parser.add_argument("--limit-at", type=int, default=5, help="exchange of the chatbot's limit")
    args = parser.parse_args()
    HELP_AT, LIMIT_AT = args.help_at, args.limit_at
    path = Path(args.scenarios)
    if not path.exists() or not any(path.glob("*.y*ml")):
        print(f"{path}: no scenarios; using the engine test fixtures instead")
        path = REPO / "tests" / "fixtures" / "engine"
    with tempfile.TemporaryDirectory() as tmp:
        shared, n_conv, t_shared = asyncio.run(
            one([str(path)], "shared", args.max_turns, Path(tmp) / "s.db")
        )
        indep, n_conv2, t_indep = asyncio.run(
            one([str(path)], "independent", args.max_turns, Path(tmp) / "i.db")
        )
    assert n_conv == n_conv2
    print(
        f"scenarios: {path}  conversations (arms): {n_conv}  max_turns: {args.max_turns}  "
        f"help offer at exchange {HELP_AT}, limit at {LIMIT_AT}"
    )
    print(f"{'':14}{'persona':>10}{'target':>10}{'total':>10}{'wall s':>10}")
    for name, calls, t in (("shared", shared, t_shared), ("independent", indep, t_indep)):
        print(f"{name:14}{calls['persona']:>10}{calls['target']:>10}{calls['total']:>10}{t:>10.1f}")
    print(
        f"ratio independent / shared: {indep['total'] / shared['total']:.2f}x "
        f"({100 * (1 - shared['total'] / indep['total']):.0f}% fewer calls with fork: shared)"
    )


if __name__ == "__main__":
    main()
