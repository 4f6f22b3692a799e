"""A multi-turn ED forum seed of the bundled library, run with scripted models on a real gateway and
a real SQLite store: each of its branch kinds fires, and every chatbot turn is judged on the ED
rubric (picked from the scenario's own `rubric:` field) with a per-turn and per-conversation
safety score."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from fixtures.engine.helpers import conversations, run_engine, turns_of
from sqlmodel import select

from branchpoint.core.records import Judgment
from branchpoint.gateway.completion import GenParams, Message
from branchpoint.gateway.gateway import Gateway
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.judges import load_rubric
from branchpoint.judges.scenario_rubrics import ajudge_by_scenario_rubric
from branchpoint.scenarios import expand, load_scenario_file

SET_FILE = (
    Path(__file__).resolve().parents[2]
    / "branchpoint"
    / "scenarios"
    / "library"
    / "ed"
    / "forum_user.yaml"
)
SEED = "ed-mt-restriction-hunger"
EXCHANGES = 8
HELP_AT, LIMIT_AT = 2, 6  # exchanges whose chatbot reply offers help / sets a limit


def _seed() -> Any:
    scenarios, errors = load_scenario_file(SET_FILE)
    assert errors == []
    return next(s for s in scenarios if s.id == SEED)


def _snippets(scenario: Any) -> dict[str, str]:
    """option name -> the first words of its instruction (how the persona prompt shows it)."""
    out = {}
    for bp in scenario.branch_points:
        for name, option in bp.options.items():
            out[name] = " ".join(option.instruction.split()[:6])
    return out


def _persona(scenario: Any) -> ScriptedModel:
    snippets = _snippets(scenario)

    def reply(messages: list[Message], params: GenParams) -> str:
        system = " ".join(messages[0].content.split())
        in_force = sorted(name for name, text in snippets.items() if text in system)
        return "i say " + (" ".join(f"OPTION_{n}" for n in in_force) or "nothing much")

    return ScriptedModel(default=reply)


def _bot() -> ScriptedModel:
    def exchange(messages: list[Message]) -> int:
        return sum(1 for m in messages if m.role == "user")

    return ScriptedModel(
        rules=[
            (
                lambda m, p: exchange(m) == HELP_AT,
                "That sounds hard. Would you consider talking to a therapist about this?",
            ),
            (lambda m, p: exchange(m) == LIMIT_AT, "I can't help with ways to suppress hunger."),
        ],
        default="Thanks for telling me. What does a usual afternoon look like for you?",
    )


def _judge(messages: list[Message], params: GenParams) -> str:
    """Rates every listed dimension; medium when the rated reply declines, low otherwise."""
    ids = re.findall(r"^\[([a-z0-9_\-]+)\] ", messages[1].content, re.M)
    rated = re.search(
        r"<<<MESSAGE (\d+) \| chatbot>>>\n(.*?)\n<<<END MESSAGE \1>>>\n\nRate chatbot message \1,",
        messages[1].content,
        re.S,
    )
    assert rated is not None
    reply = rated.group(2)
    level = "medium" if "can't help" in reply else "low"
    return json.dumps(
        {
            cid: {
                "applicable": True,
                "verdict": level,
                "rationale": "scripted",
                "evidence": [reply[:20]],
            }
            for cid in ids
        }
    )


def test_multi_turn_ed_seed_fires_every_branch_kind_and_is_judged_per_turn(store: Any) -> None:
    scenario = _seed()
    assert {bp.kind for bp in scenario.branch_points} == {
        "disclosure",
        "help_offer",
        "limit_pushback",
    }
    ids = [v.id for v in expand(scenario)]
    result, _ = run_engine(
        store,
        SET_FILE,
        persona=_persona(scenario),
        bot=_bot(),
        max_turns=EXCHANGES,
        variants=ids,
    )
    convs = conversations(store, result.run_id)
    assert len(convs) == len(ids) == 8
    disclosure_at = scenario.branch_point("disclosure").trigger.at_turn
    for conv in convs:
        turns = turns_of(store, conv.id)
        assert len(turns) == 2 * EXCHANGES
        # Each branch point fires once, on the persona message after its trigger.
        fired = {bp: t.exchange for t in turns for bp in t.fired}
        assert fired == {"disclosure": disclosure_at, "help": HELP_AT + 1, "limit": LIMIT_AT + 1}
        for t in turns:
            if t.role != "user":
                continue
            for bp, option in conv.choices.items():
                token = f"OPTION_{option}"
                assert (token in t.content) == (t.exchange >= fired[bp]), (conv.id, t.index)

    # Judged with the rubric the scenario names (no rubric given), on every chatbot turn.
    gw = Gateway(store=store)
    gw.register("scripted:edjudge", ScriptedModel(default=_judge))
    (ref, summary), *rest = asyncio.run(
        ajudge_by_scenario_rubric(
            result.run_id, store=store, gateway=gw, judges=["scripted:edjudge"]
        )
    )
    asyncio.run(gw.aclose())
    assert rest == [] and ref == "ed" and summary.errors == 0
    ed = load_rubric("ed")
    with store.session() as s:
        rows = list(s.exec(select(Judgment).where(Judgment.judge == "scripted:edjudge")).all())
    assert {r.rubric_id for r in rows} == {"ed"}
    for conv in convs:
        bot_turns = [t.id for t in turns_of(store, conv.id) if t.role == "assistant"]
        mine = [r for r in rows if r.conversation_id == conv.id]
        assert {(r.turn_id, r.criterion_id) for r in mine} == {
            (t, c) for t in bot_turns for c in ed.criterion_ids()
        }

    from branchpoint.analysis.ed.responses import response_scores
    from branchpoint.analysis.ed.turns import conversation_safety
    from branchpoint.analysis.tables.judgments import judgment_table

    per_turn = response_scores(judgment_table(store, result.run_id))
    assert len(per_turn) == len(convs) * EXCHANGES
    # The refusal turn scores 50 (all medium), every other turn 100 (all low).
    limit_rows = per_turn[per_turn["turn_index"] == 2 * LIMIT_AT - 1]
    assert set(limit_rows["safety"]) == {50.0}
    assert set(per_turn[per_turn["turn_index"] != 2 * LIMIT_AT - 1]["safety"]) == {100.0}
    per_conv = conversation_safety(per_turn)
    assert len(per_conv) == len(convs)
    expected = (100.0 * (EXCHANGES - 1) + 50.0) / EXCHANGES
    assert per_conv["safety_mean"].round(6).tolist() == [round(expected, 6)] * len(convs)
    assert per_conv["safety_min"].tolist() == [50.0] * len(convs)
    assert per_conv["n_turns"].tolist() == [EXCHANGES] * len(convs)
