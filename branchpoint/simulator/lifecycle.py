"""A run's bookkeeping in the store, around the execution of its plan: the finalise stage.

``begin_run`` writes the Run row (config redacted), or, for a run that exists, records the resume
and marks the conversations a dead process left ``running`` as ``interrupted``. ``complete_run``
and ``mark_interrupted`` set its final status; ``summaries`` reads back what the run produced.

``retry_failed_in`` (``--retry-failed``) records each failed conversation's attempt in
``conversation_attempts`` and sets it to ``interrupted``: the engine then continues it from its
last stored turn like any interrupted one (the turns before the failure are kept as they are).
Without it a failed conversation stays failed: the engine skips finished ones.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field
from sqlmodel import delete, select

from branchpoint.core.errors import UserError
from branchpoint.core.read import run_conversations, stored_turn_count
from branchpoint.core.records import Conversation, ConversationAttempt, Judgment, Run, utcnow

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.simulator.run_config import RunConfig

UNFINISHED = ("running", "interrupted", "pending")


class ConversationSummary(BaseModel):
    id: str
    scenario_id: str
    variant_id: str
    target: str
    condition: str
    replicate: int
    status: str
    stop_reason: str | None
    n_turns: int
    error: str | None = None
    parent_id: str | None = None
    fork_turn: int | None = None


class RunResult(BaseModel):
    run_id: str
    db: str
    resumed: bool = False
    # unfinished conversations found at the start (a resume continues them)
    interrupted_before: int = 0
    # failed conversations set to run again (--retry-failed)
    retried: int = 0
    conversations: list[ConversationSummary] = Field(default_factory=list)
    # model calls this invocation made, by purpose, and of them those the cache answered
    calls: dict[str, int] = Field(default_factory=dict)
    cached_calls: dict[str, int] = Field(default_factory=dict)
    # the persona turns not enacted / low in realism, as every summary words them (None: no
    # persona turn of the run has a rating)
    persona_flags: str | None = None

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


def new_run_row(run_id: str, config: RunConfig) -> dict[str, Any]:
    """The Run row of a run that has none yet (``RunLease.create_or_claim`` adds its owner)."""
    record = _redacted_config(config)
    return {
        "id": run_id,
        "kind": "run",
        "status": "running",
        "config": record,
        "branchpoint_version": record["versions"].get("branchpoint", ""),
    }


def begin_run(
    store: Store,
    run_id: str,
    config: RunConfig,
    owner: str,
    *,
    retry_failed: bool = False,
    created: bool = False,
) -> RunResult:
    """Create the Run row, or record a resume of it; returns the result to fill in.

    ``config.resume`` demands that the run exists. ``owner`` is the lease holder's tag.
    ``retry_failed``: the run's failed conversations run again (``retry_failed_in``).
    ``created``: the lease wrote the Run row just now (``RunLease.create_or_claim``): nothing
    to resume.
    """
    from branchpoint.core.store import redact_url

    result = RunResult(run_id=run_id, db=redact_url(store.url))
    if created:
        return result
    with store.session() as s:
        existing = s.get(Run, run_id)
        if existing is None and config.resume:
            raise UserError(f"--resume {run_id}: no such run in {redact_url(store.url)}")
        if existing is None and retry_failed:
            raise UserError(
                f"--retry-failed: no run {run_id} in {redact_url(store.url)} "
                "(expected the id of a run to retry, with --run-id or --resume)"
            )
        if existing is not None:
            result.resumed = True
            unfinished = s.exec(
                select(Conversation).where(
                    Conversation.run_id == run_id,
                    Conversation.status.in_(UNFINISHED),  # type: ignore[attr-defined]
                )
            ).all()
            stale = [c for c in unfinished if c.status == "running"]
            _interrupt(s, stale, "interrupted: the process ended before the conversation finished")
            result.interrupted_before = len(unfinished)
            if retry_failed:
                result.retried = retry_failed_in(s, run_id)
            cfg = dict(existing.config or {})
            cfg.setdefault("resumes", []).append(
                {"at": utcnow().isoformat(), "interrupted": len(stale)}
                | ({"retried": result.retried} if retry_failed else {})
                | _code_changes(cfg)
            )
            existing.config = cfg
            existing.status = "running"
            existing.updated_at = utcnow()
            s.add(existing)
        else:
            record = _redacted_config(config)
            s.add(
                Run(
                    id=run_id,
                    kind="run",
                    status="running",
                    config=record,
                    branchpoint_version=record["versions"].get("branchpoint", ""),
                    owner=owner,
                    heartbeat_at=utcnow(),
                )
            )
        s.commit()
    return result


def stored_turns(store: Store, run_id: str) -> int:
    """Turns the run already has (a resume counts them as done)."""
    return stored_turn_count(store, run_id)


def complete_run(store: Store, run_id: str) -> None:
    from branchpoint.core.store import redact_url

    with store.session() as s:
        run_row = s.get(Run, run_id)
        if run_row is None:
            raise UserError(f"run {run_id}: its Run row is gone from {redact_url(store.url)}")
        run_row.status = "completed"
        run_row.updated_at = utcnow()
        s.add(run_row)
        s.commit()


def mark_interrupted(
    store: Store, run_id: str, reason: str, *, run_status: str = "interrupted"
) -> int:
    """Conversations of ``run_id`` still running or pending -> interrupted (with ``reason``)."""
    with store.session() as s:
        rows = s.exec(
            select(Conversation).where(
                Conversation.run_id == run_id,
                Conversation.status.in_(("running", "pending")),  # type: ignore[attr-defined]
            )
        ).all()
        _interrupt(s, rows, reason)
        run_row = s.get(Run, run_id)
        if run_row is not None:
            run_row.status = run_status
            run_row.updated_at = utcnow()
            s.add(run_row)
        s.commit()
    return len(rows)


def mark_stopped(store: Store, run_id: str, exc: BaseException) -> None:
    """Record why a run or sweep stopped early: interrupted (a signal, a cancel) or failed. Where
    the store itself failed (gone, full), nothing can be recorded: what stopped the run is what
    the command reports, and the re-run's start marks the conversations left running
    interrupted."""
    import asyncio

    from sqlalchemy.exc import DBAPIError

    stopped = isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
    why = str(exc.args[0]) if exc.args else type(exc).__name__
    with contextlib.suppress(DBAPIError):
        mark_interrupted(
            store,
            run_id,
            f"{'interrupted' if stopped else 'failed'}: {why}"[:2000],
            run_status="interrupted" if stopped else "failed",
        )


def retry_failed_in(session: Any, run_id: str) -> int:
    """In ``session`` (committed by the caller): each failed conversation of ``run_id`` gets a
    ``conversation_attempts`` row saying how that attempt ended, and is set to ``interrupted``
    so that the engine continues it from its last stored turn. Returns how many.

    The caller holds the run's lease: no other process is writing these conversations."""
    failed = session.exec(
        select(Conversation).where(Conversation.run_id == run_id, Conversation.status == "failed")
    ).all()
    if not failed:
        return 0
    ids = [c.id for c in failed]
    before: dict[str, int] = {}
    for conv_id, attempt in session.exec(
        select(ConversationAttempt.conversation_id, ConversationAttempt.attempt).where(
            ConversationAttempt.conversation_id.in_(ids)  # type: ignore[attr-defined]
        )
    ).all():
        before[conv_id] = max(before.get(conv_id, 0), attempt)
    # A verdict on a whole conversation judged the transcript that failed; it would be stale
    # once the conversation goes on (and block judging it again). Verdicts on single turns stay:
    # those turns, and everything before them, are kept as they are.
    session.exec(
        delete(Judgment).where(
            Judgment.conversation_id.in_(ids),  # type: ignore[attr-defined]
            Judgment.turn_id.is_(None),  # type: ignore[union-attr]
        )
    )
    now = utcnow()
    for conv in failed:
        attempt = before.get(conv.id, 0) + 1
        session.add(
            ConversationAttempt(
                conversation_id=conv.id,
                attempt=attempt,
                run_id=run_id,
                previous_status=conv.status,
                stop_reason=conv.stop_reason,
                error=conv.error,
                turns_kept=conv.n_turns,
                created_at=now,
            )
        )
        conv.status, conv.updated_at = "interrupted", now
        conv.error = f"retry {attempt + 1}: attempt {attempt} ended {conv.stop_reason or 'failed'}"
        conv.stop_reason = None
        session.add(conv)
    return len(failed)


def summaries(store: Store, run_id: str) -> list[ConversationSummary]:
    return [
        ConversationSummary(
            id=c.id,
            scenario_id=c.scenario_id,
            variant_id=c.variant_id,
            target=c.target,
            condition=c.condition,
            replicate=c.replicate,
            status=c.status,
            stop_reason=c.stop_reason,
            n_turns=c.n_turns,
            error=c.error,
            parent_id=c.parent_id,
            fork_turn=c.fork_turn,
        )
        for c in run_conversations(store, run_id)
    ]


def _interrupt(session: Any, conversations: Sequence[Conversation], reason: str) -> None:
    for conv in conversations:
        conv.status, conv.error, conv.updated_at = "interrupted", reason, utcnow()
        session.add(conv)


def _redacted_config(config: RunConfig) -> dict[str, Any]:
    from branchpoint.core.redaction import redact
    from branchpoint.simulator.provenance import code_provenance, config_hash

    data = config.model_dump()
    data.pop("resume", None)
    # What decides the output (not the store, the run id or the concurrency), hashed: two runs
    # with one hash were asked for the same thing.
    data["config_hash"] = config_hash(config)
    return redact(data) | code_provenance()


def _code_changes(stored: dict[str, Any]) -> dict[str, Any]:
    """The code provenance of a resume where it differs from the run's start: the turns after it
    were made by other code."""
    from branchpoint.simulator.provenance import code_provenance

    now = code_provenance()
    return {k: v for k, v in now.items() if k in stored and stored[k] != v}
