"""``branchpoint judge --batch``: a model judge's calls through its provider's batch API.

Only the transport changes. The requests are the judge's own (``LLMJudge.request``: the same
prompt, params and schema as a direct call), and each reply is read by the same parser
(``LLMJudge.verdicts_from_reply``); a reply that does not parse, a request the batch answered
with an error, and a request it left unanswered (a batch that failed, expired or was cancelled)
are ``error`` verdicts, never a pass. There is no second try inside a batch:
``--retry-errors`` asks again.

Resumable without paying twice. Before a batch is created its submission is stored
(``JudgeBatch``, status ``submitting``) with a token that goes into the batch's metadata; the
batch's id is stored as soon as the provider answers, before any waiting. A judge killed while
its batch is pending finds the row when run again and polls that batch; a row still
``submitting`` (killed between the provider's answer and the commit) is matched to its batch by
the token in the provider's list of batches, and only where none is found is it submitted again.
Each result becomes one ``ModelCall`` row (its id derived from the batch and request, so a
resumed judge reading the same results writes none twice) priced at the batch price
(``Gateway.batch_price``), and one set of verdict rows per unit, skipped where already stored.
"""

from __future__ import annotations

import hashlib
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from branchpoint.core.untrusted import visible
from branchpoint.judges.verdicts import CriterionVerdict, JudgingUnit, error_verdicts

if TYPE_CHECKING:
    from branchpoint.gateway.batch import BatchAPI, BatchJob, BatchTarget
    from branchpoint.judges.llm_judge import LLMJudge
    from branchpoint.judges.rubric import Criterion, Rubric

UnitKey = tuple[str, str | None]
JudgmentKey = tuple[str, str | None, str, str]  # (conversation, turn, judge, version)


class _Group(Protocol):
    """Units that share one transcript, judged once (``branchpoint.judges.runner._Group``)."""

    units: list[JudgingUnit]
    criteria: list[Criterion]


class JudgingRunner(Protocol):
    """What a batch pass uses of ``branchpoint.judges.runner.JudgingRunner`` (which imports this module)."""

    store: Any
    rubric: Rubric
    rubric_hash: str
    summary: Any  # branchpoint.judges.runner.JudgeSummary
    _done: set[JudgmentKey]

    def _key(self, unit: JudgingUnit, name: str, version: str) -> JudgmentKey: ...

    def _write(
        self, units: list[JudgingUnit], name: str, version: str, verdicts: list[CriterionVerdict]
    ) -> None: ...

    def _stored(self, key: JudgmentKey) -> list[CriterionVerdict]: ...


__all__ = ["BatchJudging", "DEFAULT_POLL_S", "batch_target_of"]

DEFAULT_POLL_S = 30.0
SUBMISSION_KEY = "branchpoint_submission"  # the batch metadata that names its JudgeBatch row


def batch_target_of(judge: LLMJudge) -> BatchTarget:
    """Where ``judge``'s batches go; a UserError (one line) for a judge with no batch API."""
    from branchpoint.gateway.batch import batch_target
    from branchpoint.gateway.completion import GenParams

    return batch_target(judge.spec, judge.params or GenParams())


def custom_id(conversation_id: str, turn_id: str | None) -> str:
    """A request's id in its batch: the unit it judges, short (providers bound its length)."""
    key = f"{conversation_id}\x1f{turn_id or '-'}"
    return "u" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:30]


def _printable(text: str) -> str:
    """A provider's word as shown on the terminal: one line, controls as escapes (branchpoint.core.untrusted)."""
    return visible(text, multiline=False)[:120]


class BatchJudging:
    """One LLM judge's pending units in a runner, judged through batches; see the module doc."""

    def __init__(
        self,
        runner: JudgingRunner,
        judge: LLMJudge,
        *,
        poll_s: float = DEFAULT_POLL_S,
        progress: bool = True,
    ) -> None:
        self.runner = runner
        self.judge = judge
        self.target = batch_target_of(judge)
        self.poll_s = max(0.05, poll_s)
        self.progress = progress
        self.name, self.version = judge.name, judge.version

    # -- the runner's state --------------------------------------------------------------------

    def _done(self, unit: JudgingUnit) -> bool:
        return self.runner._key(unit, self.name, self.version) in self.runner._done

    def _say(self, line: str, *, final: bool = True) -> None:
        if not self.progress:
            return
        if sys.stderr.isatty() and not final:
            sys.stderr.write("\r\x1b[2K" + line)  # one line, rewritten each poll
        else:
            sys.stderr.write(("\r\x1b[2K" if sys.stderr.isatty() else "") + line + "\n")
        sys.stderr.flush()

    # -- the pass --------------------------------------------------------------------------------

    async def run(self, groups: list[Any]) -> None:
        """Judge every pending unit of ``groups`` (``branchpoint.judges.runner._Group``s)."""
        from branchpoint.gateway.batch import BatchAPI

        summary = self.runner.summary
        for g in groups:
            summary.units += len(g.units)
            summary.skipped += sum(1 for u in g.units if self._done(u))
        index: dict[UnitKey, _Group] = {
            (u.conversation_id, u.turn_id): g for g in groups for u in g.units
        }
        api = BatchAPI(self.target)
        try:
            await self._resume(api, index)
            todo: list[_Group] = []
            for g in groups:
                done = [u for u in g.units if self._done(u)]
                pending = [u for u in g.units if not self._done(u)]
                if not pending:
                    continue
                if done:  # a copy of this transcript has verdicts: serve the rest from them
                    key = self.runner._key(done[0], self.name, self.version)
                    self.runner._write(pending, self.name, self.version, self.runner._stored(key))
                    summary.copied += len(pending)
                    continue
                todo.append(g)
            if todo:
                rows = await self._submit(api, todo)
                for row_id in rows:
                    await self._finish(api, row_id, index)
        finally:
            await api.aclose()

    def _open_rows(self) -> list[Any]:
        from sqlmodel import col, select

        from branchpoint.core.records import JudgeBatch
        from branchpoint.core.redaction import redact_text

        with self.runner.store.session() as s:
            return list(
                s.exec(
                    select(JudgeBatch)
                    .where(
                        JudgeBatch.judge == self.name,
                        JudgeBatch.prompt_version == self.version,
                        JudgeBatch.rubric_hash == self.runner.rubric_hash,
                        JudgeBatch.api_base == redact_text(self.target.api_base),
                        col(JudgeBatch.status).in_(("submitting", "submitted")),
                    )
                    .order_by(col(JudgeBatch.created_at))
                ).all()
            )

    def _update(self, row_id: str, **values: Any) -> None:
        from branchpoint.core.records import JudgeBatch, utcnow

        with self.runner.store.session() as s:
            row = s.get(JudgeBatch, row_id)
            assert row is not None
            for name, value in values.items():
                setattr(row, name, value)
            row.updated_at = utcnow()
            s.add(row)
            s.commit()

    async def _resume(self, api: BatchAPI, index: dict[UnitKey, _Group]) -> None:
        """Finish the batches an earlier run of this judge left pending (those that judge units
        of this selection; others wait for a run that selects them)."""
        for row in self._open_rows():
            units = [(str(c), t) for c, t in row.requests.values()]
            if not any(u in index for u in units):
                continue
            if row.status == "submitting":
                job = await api.find(SUBMISSION_KEY, row.id)
                if job is None:  # never created: its units are submitted again below
                    self._update(row.id, status="abandoned", error="no batch was created")
                    continue
                self._update(row.id, batch_id=job.id, status="submitted")
            self._say(f"resuming batch {_printable(row.batch_id or '')} of {self.name}")
            await self._finish(api, row.id, index)

    async def _submit(self, api: BatchAPI, groups: list[_Group]) -> list[str]:
        """Submit the groups' requests (in as many batches as the provider's limits need);
        returns the JudgeBatch rows' ids, each committed with its batch id before any wait."""
        from branchpoint.core.records import JudgeBatch
        from branchpoint.core.redaction import redact_text
        from branchpoint.gateway.batch import MAX_BYTES, MAX_LINES, request_line

        chunks: list[tuple[list[bytes], dict[str, list[str | None]]]] = [([], {})]
        size = 0
        for g in groups:
            rep = g.units[0]
            cid = custom_id(rep.conversation_id, rep.turn_id)
            messages, params = self.judge.request(self.runner.rubric, rep, g.criteria)
            line, _sent = request_line(cid, self.target, messages, params)
            lines, requests = chunks[-1]
            if lines and (len(lines) >= MAX_LINES or size + len(line) > MAX_BYTES):
                chunks.append(([], {}))
                lines, requests, size = *chunks[-1], 0
            lines.append(line)
            requests[cid] = [rep.conversation_id, rep.turn_id]
            size += len(line) + 1
        ids: list[str] = []
        for lines, requests in chunks:
            file_id = await api.upload(lines)  # a server with no batch API stops here
            token = uuid.uuid4().hex
            with self.runner.store.session() as s:
                s.add(
                    JudgeBatch(
                        id=token,
                        judge=self.name,
                        prompt_version=self.version,
                        rubric_hash=self.runner.rubric_hash,
                        api_base=redact_text(self.target.api_base),
                        requests=requests,
                    )
                )
                s.commit()
            job = await api.create(file_id, {SUBMISSION_KEY: token})
            self._update(token, batch_id=job.id, status="submitted")
            self._say(
                f"submitted batch {_printable(job.id)} of {self.name}: {len(lines)} request(s); "
                f"waiting for it (Ctrl-C leaves it running: the next `judge --batch` picks it up)"
            )
            ids.append(token)
        return ids

    async def _wait(self, api: BatchAPI, batch_id: str) -> BatchJob:
        import asyncio

        started = time.monotonic()
        while True:
            job = await api.job(batch_id)
            waited = time.monotonic() - started
            self._say(
                f"batch {_printable(job.id)} of {self.name}: {_printable(job.status)}, "
                f"{job.completed + job.failed}/{job.total} answered, {job.failed} failed, "
                f"{waited:.0f}s waited",
                final=job.done,
            )
            if job.done:
                return job
            await asyncio.sleep(self.poll_s)

    async def _finish(self, api: BatchAPI, row_id: str, index: dict[UnitKey, _Group]) -> None:
        """Wait for the row's batch, then store each request's call and verdicts (once)."""
        from branchpoint.core.records import JudgeBatch

        with self.runner.store.session() as s:
            row = s.get(JudgeBatch, row_id)
            assert row is not None and row.batch_id is not None
            batch_id, requests = row.batch_id, dict(row.requests)
        job = await self._wait(api, batch_id)
        results = await api.results(job)
        runner, judge = self.runner, self.judge
        for cid, (conv_id, turn_id) in requests.items():
            group = index.get((conv_id, turn_id))
            if group is None:
                continue  # not in this selection (or no longer judged by this rubric)
            pending = [u for u in group.units if not self._done(u)]
            if not pending:
                continue
            rep = next(
                u for u in group.units if (u.conversation_id, u.turn_id) == (conv_id, turn_id)
            )
            messages, params, layout = judge.prompt(runner.rubric, rep, group.criteria)
            result = results.get(cid)
            completion = result.completion if result is not None else None
            if result is None:
                error: str | None = (
                    f"batch {batch_id} ended {job.status} without an answer to this request"
                )
            else:
                error = result.error
            call_id = hashlib.sha256(f"{batch_id}\x1f{cid}".encode()).hexdigest()[:32]
            judge.gateway.record_batch_call(
                call_id, judge.spec, messages, params, completion, error,
                batch_id=batch_id, purpose="judge", run_id=rep.run_id,
                conversation_id=rep.conversation_id, layout=layout,
            )  # fmt: skip
            verdicts: list[CriterionVerdict]
            if completion is None:
                reason = f"judge batch request failed: {error}"
                verdicts = error_verdicts(group.criteria, reason[:4000], call_id=call_id)
            else:
                verdicts = judge.verdicts_from_reply(
                    runner.rubric,
                    rep,
                    group.criteria,
                    completion.text,
                    finish_reason=completion.finish_reason,
                    call_id=call_id,
                )
            runner._write(pending, self.name, self.version, verdicts)
            runner.summary.judged += 1
            runner.summary.copied += len(pending) - 1
        await judge.gateway.flush()
        self._update(row_id, status="done")
