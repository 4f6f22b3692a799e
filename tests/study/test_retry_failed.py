"""``--retry-failed`` as a user runs it: a sweep (and a run) against the loopback server that fails
some conversations midway, then completes them from their last stored turn.

The server answers through a scripted model that, while ``broken``, refuses (HTTP 500) every
third request past the first exchange (which conversations those are depends on the order the
requests arrive in; what is asserted does not). With
``execution.retries: 0`` those conversations fail; ``--retry-failed`` with the server mended must
complete them with the turns before the failure untouched and only the missing calls made, so that
the store ends as a sweep that never failed (compared with one into another store).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_sweep_cli import SCENARIO, cli, rows

from branchpoint.gateway.completion import GenParams, Message, ModelError
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.gateway.testing.openai_server import ServerThread


class Flaky:
    """The server's answer: a reply made of the exchange; while ``broken``, every third request
    past the first exchange is refused (so the conversation has stored turns when it fails)."""

    def __init__(self, every: int = 3) -> None:
        self.broken = True
        self.every = every
        self.later = 0  # requests past the first exchange while broken
        self.refused = 0

    def __call__(self, messages: list[Message], params: GenParams) -> str:
        users = [m.content for m in messages if m.role == "user"]
        if self.broken and len(users) >= 2:
            self.later += 1
            if self.later % self.every == 0:
                self.refused += 1
                raise ModelError("injected server fault", retryable=True)
        return f"reply {len(users)} to {users[-1][:60]}"


@pytest.fixture
def flaky() -> Iterator[tuple[str, Flaky]]:
    answer = Flaky()
    server = ServerThread(
        model="scripted:flaky", models={"scripted:flaky": ScriptedModel(default=answer)}
    )
    url = server.start()
    try:
        yield url, answer
    finally:
        server.stop()


def _manifest(path: Path, url: str, fork: str) -> Path:
    path.write_text(
        "\n".join(
            [
                "scenarios:",
                f"  paths: [{SCENARIO}]",
                "targets:",
                "  - spec: oai:flaky",
                f"    params: {{api_base: '{url}'}}",
                # a price of its own: no lookup in litellm's price map (seconds per command)
                "    price: {input_per_mtok: 1, output_per_mtok: 2}",
                "simulators: [scripted:sweep-persona]",
                "max_exchanges: 3",
                "replicates: 2",
                f"fork: {fork}",
                "execution: {retries: 0}",
                "store: results.db",
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    return path


def _transcripts(db: Path) -> dict[str, list[tuple[object, ...]]]:
    out: dict[str, list[tuple[object, ...]]] = {}
    for conv, index, role, content in rows(
        db, 'select conversation_id, "index", role, content from turns order by 1, 2'
    ):
        out.setdefault(str(conv), []).append((index, role, content))
    return out


def _ok_calls(db: Path) -> dict[str, int]:
    return {
        str(p): int(n)
        for p, n in rows(
            db, "select purpose, count(*) from model_calls where error is null group by purpose"
        )
    }


@pytest.mark.parametrize("fork", ["shared", "independent"])
@pytest.mark.slow
def test_sweep_retry_failed_completes_failed_conversations_from_their_last_turn(
    tmp_path: Path, flaky: tuple[str, Flaky], fork: str
) -> None:
    url, answer = flaky
    (tmp_path / "run").mkdir()
    db = tmp_path / "run" / "results.db"
    manifest = _manifest(tmp_path / "run" / "study.yaml", url, fork)

    first = cli("sweep", str(manifest))
    assert first.returncode == 1, first.stderr
    status = dict(rows(db, "select id, status from conversations"))
    failed = {i for i, s in status.items() if s == "failed"}
    assert failed and len(failed) < len(status), status  # some failed midway, some completed
    assert answer.refused > 0
    if fork == "shared":  # a refused call in a shared prefix failed every arm of its group
        assert len(failed) > answer.refused
    assert f"{len(failed)} conversation(s) failed: run again with --retry-failed" in first.stdout
    assert {r for (r,) in rows(db, "select stop_reason from conversations where status='failed'")}
    assert rows(db, "select count(*) from conversation_attempts") == [(0,)]

    if fork == "shared":  # (once is enough) without the flag, failed ones stay failed
        calls_before = rows(db, "select count(*) from model_calls")[0][0]
        again = cli("sweep", str(manifest))
        assert again.returncode == 1, again.stderr
        still = {i for i, s in rows(db, "select id, status from conversations") if s == "failed"}
        assert still == failed
        assert rows(db, "select count(*) from model_calls")[0][0] == calls_before

    kept = {
        t: (c, at)
        for t, c, at in rows(
            db,
            "select t.id, t.content, t.created_at from turns t join conversations c "
            "on c.id = t.conversation_id where c.status = 'failed'",
        )
    }
    assert kept  # the failures came after some turns were stored
    ok_before = _ok_calls(db)
    answer.broken = False
    retried = cli("sweep", str(manifest), "--retry-failed")
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert f"retried {len(failed)} failed conversation(s)" in retried.stdout
    # its plan counted the failed cells as to do
    assert f"({len(status) - len(failed)} done, {len(failed)} to do)" in retried.stdout
    assert {s for (s,) in rows(db, "select status from conversations")} == {"completed"}
    now = {t: (c, at) for t, c, at in rows(db, "select id, content, created_at from turns")}
    assert all(now[t] == v for t, v in kept.items())  # the turns before the failure, untouched
    for conv, indexes in _indexes(db).items():
        assert indexes == list(range(len(indexes))), conv  # no turn written twice

    attempts = rows(
        db,
        "select conversation_id, attempt, previous_status, stop_reason, turns_kept "
        "from conversation_attempts",
    )
    assert {a[0] for a in attempts} == failed
    assert all(a[1] == 1 and a[2] == "failed" and a[3] == "target_error" for a in attempts)
    n_kept = {str(c): int(n) for c, n in rows(db, "select conversation_id, count(*) from turns "
                                               "group by conversation_id")}  # fmt: skip
    assert all(0 < a[4] < n_kept[str(a[0])] for a in attempts)

    # The same sweep, never failing, into another store: the same transcripts, the same calls.
    clean_dir = tmp_path / "clean"
    clean_dir.mkdir()
    clean = cli("sweep", str(_manifest(clean_dir / "study.yaml", url, fork)))
    assert clean.returncode == 0, clean.stderr
    clean_db = clean_dir / "results.db"
    assert _transcripts(db) == _transcripts(clean_db)
    ok_after, ok_clean = _ok_calls(db), _ok_calls(clean_db)
    assert ok_after == ok_clean  # exactly the missing calls were made, no call twice
    assert sum(ok_after.values()) - sum(ok_before.values()) > 0

    # Analysis can leave the retried conversations out.
    from branchpoint.core.read import retried_conversations

    assert retried_conversations(str(db), ["sweep-study"]) == failed
    assert retried_conversations(str(clean_db)) == set()


def _indexes(db: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for conv, index in rows(db, 'select conversation_id, "index" from turns order by 1, 2'):
        out.setdefault(str(conv), []).append(int(index))
    return out


@pytest.mark.slow
def test_run_retry_failed_resumes_the_run_and_exits_0(
    tmp_path: Path, flaky: tuple[str, Flaky]
) -> None:
    url, answer = flaky
    answer.every = 1  # every conversation fails at its second exchange, whatever the retries
    db = tmp_path / "results.db"
    args = [
        "run",
        str(SCENARIO),
        "--target",
        "oai:flaky",
        "--target-param",
        f"api_base={url}",
        "--simulator",
        "scripted:sweep-persona",
        "--max-turns",
        "3",
        "--db",
        str(db),
        "--run-id",
        "flaky-run",
    ]
    first = cli(*args)
    assert first.returncode == 1, first.stderr
    failed = {i for (i,) in rows(db, "select id from conversations where status = 'failed'")}
    assert failed
    assert "--run-id flaky-run --retry-failed" in first.stderr

    refused = cli(*args[:-2], "--retry-failed")
    assert refused.returncode == 2
    assert "--retry-failed: expected --run-id ID or --resume ID" in refused.stderr

    answer.broken = False
    retried = cli(*args, "--retry-failed")
    assert retried.returncode == 0, retried.stderr
    assert f"retried {len(failed)} failed conversation(s)" in retried.stderr
    assert {s for (s,) in rows(db, "select status from conversations")} == {"completed"}
    attempts = rows(db, "select conversation_id, attempt, run_id from conversation_attempts")
    assert {a[0] for a in attempts} == failed
    assert {(a[1], a[2]) for a in attempts} == {(1, "flaky-run")}
    assert all(sorted(ix) == list(range(len(ix))) for ix in _indexes(db).values())


@pytest.mark.slow
def test_exclude_retried_leaves_retried_conversations_out_of_the_analysis(tmp_path: Path) -> None:
    """On a judged store, the conversations with an attempt row are left out, and only those."""
    from branchpoint.analysis.pipeline import run_analysis
    from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store
    from branchpoint.core.store import open_store

    db = tmp_path / "judged.db"
    design = TeenDesign(n_scenarios=4, targets=("scripted:a", "scripted:b"), n_exchanges=3)
    write_teen_store(db, design, seed=1)
    open_store(str(db)).close()  # an older store gets the attempts table when opened
    ids = [i for (i,) in rows(db, "select id from conversations order by id")]
    judged = {i for (i,) in rows(db, "select distinct conversation_id from judgments")}
    retried = sorted(judged)[:5]
    with sqlite3.connect(db) as con:
        con.executemany(
            "insert into conversation_attempts (conversation_id, attempt, run_id, "
            "previous_status, stop_reason, error, turns_kept, created_at) "
            "values (?, 1, ?, 'failed', 'target_error', 'boom', 2, '2026-01-01 00:00:00')",
            [(i, design.run_id) for i in retried],
        )
    whole = run_analysis(str(db), n_boot=0)
    left = run_analysis(str(db), n_boot=0, exclude_retried=True)
    assert len(ids) > whole.n_conversations - 5 > 0
    assert left.n_conversations == whole.n_conversations - len(retried)
    assert f"{len(retried)} retried conversation(s) left out (--exclude-retried)" in left.notes
    assert whole.n_judgments > left.n_judgments

    res = cli("analyze", "--all", "--n-boot", "0", "--exclude-retried", "--db", str(db))
    assert res.returncode == 0, res.stderr
    assert f"{left.n_conversations} conversations" in res.stdout
    assert "retried conversation(s) left out" in res.stdout


def test_retry_records_each_attempt_and_drops_only_whole_conversation_verdicts(store: Any) -> None:
    """On SQLite and PostgreSQL: failed conversations get numbered attempts and become
    interrupted; completed ones are not touched; a verdict on a whole (failed) transcript goes,
    verdicts on its turns stay."""
    from sqlmodel import select

    from branchpoint.core.read import retried_conversations
    from branchpoint.core.records import Conversation, ConversationAttempt, Judgment, Run
    from branchpoint.simulator.lifecycle import retry_failed_in

    def conv(i: str, status: str, reason: str | None) -> Conversation:
        return Conversation(
            id=i, run_id="r", scenario_id="s", scenario_hash="h", variant_id="v", target="t",
            status=status, stop_reason=reason, error=f"{i} broke" if reason else None, n_turns=3,
        )  # fmt: skip

    def verdict(i: str, conv_id: str, turn_id: str | None) -> Judgment:
        return Judgment(
            id=i, run_id="r", conversation_id=conv_id, turn_id=turn_id, rubric_id="teen",
            rubric_hash="x", criterion_id="c", judge="heuristic", verdict="pass",
        )  # fmt: skip

    with store.session() as s:
        s.add(Run(id="r"))
        s.add(Run(id="other"))
        s.commit()
        s.add_all([conv("a", "failed", "target_error"), conv("b", "completed", "max_turns")])
        s.add_all([verdict("ja", "a", None), verdict("ja1", "a", "a:1"), verdict("jb", "b", None)])
        s.commit()
        assert retry_failed_in(s, "r") == 1
        s.commit()
        assert retry_failed_in(s, "other") == 0
        a, b = s.get(Conversation, "a"), s.get(Conversation, "b")
        assert a is not None and b is not None
        assert (a.status, a.stop_reason, b.status) == ("interrupted", None, "completed")
        assert a.error == "retry 2: attempt 1 ended target_error"
        assert sorted(j.id for j in s.exec(select(Judgment))) == ["ja1", "jb"]
        # it fails again, and is retried again: attempt 2
        a.status, a.stop_reason, a.error = "failed", "simulator_error", "again"
        s.add(a)
        s.commit()
        assert retry_failed_in(s, "r") == 1
        s.commit()
        attempts = [
            (x.attempt, x.previous_status, x.stop_reason, x.error, x.turns_kept)
            for x in s.exec(select(ConversationAttempt).order_by(ConversationAttempt.attempt))
        ]
    assert attempts == [
        (1, "failed", "target_error", "a broke", 3),
        (2, "failed", "simulator_error", "again", 3),
    ]
    assert (
        retried_conversations(store, "r") == {"a"}
        and retried_conversations(store, "other") == set()
    )
