"""The TUI's read queries (``branchpoint.core.read.browse``) on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from branchpoint.core.read.browse import (
    ConversationFilter,
    conversations_page,
    facets,
    find_failure,
    list_runs,
    run_progress,
    tree_arms,
)
from branchpoint.core.records import Conversation, Judgment, Run, Turn


def _fill(store: Any) -> None:
    now = datetime.now(UTC)
    with store.session() as s:
        s.add(Run(id="r1", status="running", heartbeat_at=now))
        s.add(Run(id="r2", status="completed"))
        s.flush()
        specs = [
            ("a", "r1", "t1", {"disclosure": "open"}, "completed", now),
            ("b", "r1", "t1", {"disclosure": "guarded"}, "completed", now - timedelta(minutes=5)),
            ("c", "r1", "t2", {"disclosure": "open"}, "running", now),
            ("d", "r2", "t2", {"disclosure": "open"}, "failed", now),
        ]
        for cid, run, target, choices, status, updated in specs:
            s.add(
                Conversation(
                    id=cid, run_id=run, scenario_id="scn", scenario_hash="h", variant_id=f"v{cid}",
                    choices=choices, target=target, status=status, updated_at=updated,
                )
            )  # fmt: skip
        s.flush()
        for cid in "abcd":
            for i in range(4):
                role = "user" if i % 2 == 0 else "assistant"
                text = "Hello 100% [there]" if (cid, i) == ("b", 1) else f"{cid} says {i}"
                s.add(Turn(id=f"{cid}:{i}", conversation_id=cid, index=i, exchange=i // 2 + 1,
                           role=role, content=text, cost=0.5 if role == "assistant" else None))  # fmt: skip
        fails = {("a", 1): "fail", ("a", 3): "fail", ("b", 3): "fail", ("c", 1): "pass"}
        for (cid, ti), verdict in fails.items():
            s.add(Judgment(id=f"{cid}{ti}", run_id="r1", conversation_id=cid, turn_id=f"{cid}:{ti}",
                           turn_index=ti, rubric_id="teen", rubric_hash="h", criterion_id="k",
                           judge="j1", verdict=verdict))  # fmt: skip
        s.add(Judgment(id="a1b", run_id="r1", conversation_id="a", turn_id="a:1", turn_index=1,
                       rubric_id="teen", rubric_hash="h", criterion_id="k", judge="j2", verdict="pass"))  # fmt: skip
        s.commit()


def test_pages_filters_and_sorting(store) -> None:  # type: ignore[no-untyped-def]
    _fill(store)
    runs = {r.id: r for r in list_runs(store)}
    assert (runs["r1"].n_conversations, runs["r1"].n_completed, runs["r1"].n_running) == (3, 2, 1)
    assert runs["r2"].n_failed == 1

    page = conversations_page(store, ConversationFilter(run_id="r1", sort="failures"), 0, 2)
    assert page.total == 3 and [r.id for r in page.rows] == ["a", "b"]
    assert [r.n_fail for r in page.rows] == [2, 1]
    rest = conversations_page(store, ConversationFilter(run_id="r1", sort="failures"), 2, 2)
    assert [r.id for r in rest.rows] == ["c"]

    def ids(**kw: Any) -> list[str]:
        return [r.id for r in conversations_page(store, ConversationFilter(**kw)).rows]

    assert ids(choices={"disclosure": "open"}) == ["a", "c", "d"]
    assert ids(choices={"disclosure": "open"}, target="t2") == ["c", "d"]
    assert ids(failing="k") == ["a", "b"]
    assert ids(failing="k", judge="j2") == []  # j2 found no failure
    assert ids(judge="j2") == ["a"]
    assert ids(text="100% [THERE]") == ["b"]  # literal, case-insensitive
    assert ids(text="100%_") == []  # % and _ are not wildcards
    assert ids(status="failed") == ["d"]
    assert facets(store, "r1")["target"] == ["t1", "t2"]


def test_failure_jumps_arms_and_progress(store) -> None:  # type: ignore[no-untyped-def]
    _fill(store)
    assert find_failure(store, "a", -1) == 1
    assert find_failure(store, "a", 1) == 3
    assert find_failure(store, "a", 3) is None
    assert find_failure(store, "a", 3, direction="previous") == 1
    assert find_failure(store, "a", -1, judge="j2") is None
    assert {c.id for c in tree_arms(store, "a")} == {"a", "b"}  # same run, scenario, target
    progress = {p.target: p for p in run_progress(store, "r1", datetime.now(UTC))}
    assert (progress["t1"].done, progress["t1"].done_last_minute) == (2, 1)
    assert progress["t2"].running == 1
    assert progress["t1"].cost == 2.0  # two chatbot turns of 0.5 in each of two conversations
