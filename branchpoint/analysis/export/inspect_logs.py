"""Inspect AI eval logs of a store's conversations, browsable with ``inspect view``.

Built with the ``inspect_ai`` package's own log types and writer (the optional extra
``branchpoint[inspect]``), imported only here and only when called, so no other command pays for
it. Grouping: one log per run x target x condition. An Inspect log is one task run against one
model under one configuration; in branchpoint that is a target under a system-prompt condition
within a run (conditions are never pooled, and a log per scenario would scatter one study over
hundreds of files). Simulators, variants and replicates are samples of that log, told apart by
their metadata.

Each conversation is one sample (id: the conversation id, epoch 1): its messages in order (the
condition's system prompt, the persona as ``user``, the chatbot as ``assistant``; message ids are
turn ids), its scenario, variant, arm choices, fork point and parent, simulator, replicate and
realised branches in ``metadata``. Each criterion a judge rated is one score, named
``<criterion> [<judge>]`` (rubric in its metadata): its value is the worst verdict over the
conversation's chatbot turns (``error`` when none could be rated), its explanation lists every
turn's verdict with the judge's rationale and evidence quotes, and its metadata holds the per-turn
verdicts as data. Every assistant message also carries its own verdicts in its metadata. The run's
provenance (run id, kind, status, branchpoint version, the redacted run config) is in the log's
spec metadata. The log asks the viewer not to trust its content (``ViewerConfig(trust_content=
False)``), so Markdown, links or media in a model's reply are shown as plain text. Text is
redacted (``branchpoint.core.redaction``) like every export.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from branchpoint.analysis.export.transcripts import TranscriptRecord, Verdict, iter_transcripts
from branchpoint.core.errors import UserError
from branchpoint.core.scales import ERROR, SCALES

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample

INSTALL_HINT = "pip install 'branchpoint[inspect]' (or: pip install inspect-ai)"
NOT_APPLICABLE = "not applicable"


def _inspect() -> None:
    try:
        import inspect_ai.log  # noqa: F401
    except ImportError:
        raise UserError(f"--format inspect needs the inspect-ai package: {INSTALL_HINT}") from None


def score_name(verdict: Verdict) -> str:
    return f"{verdict.criterion_id} [{verdict.judge}]"


def worst_verdict(verdicts: Sequence[Verdict]) -> str:
    """The worst level any turn got on its scale; ``error`` if only errors; else not applicable.

    Levels off the ordinal scale (``refusal``) rank after every ordinal level."""
    levels = [v.verdict for v in verdicts if v.applicable and v.verdict and v.verdict != ERROR]
    if not levels:
        return ERROR if any(v.verdict == ERROR for v in verdicts) else NOT_APPLICABLE

    def rank(level: str) -> tuple[int, str]:
        for scale in SCALES.values():
            if level in scale.levels:
                return scale.rank(level), level
        return len(max((s.levels for s in SCALES.values()), key=len)), level

    return min(levels, key=rank)


def _turn_line(v: Verdict) -> str:
    where = "whole conversation" if v.turn_index is None else f"turn {v.turn_index}"
    verdict = v.verdict if v.applicable else NOT_APPLICABLE
    line = f"{where}: {verdict}"
    if v.rationale:
        line += f". {v.rationale}"
    if v.error:
        line += f" (error: {v.error})"
    quotes = [str(e.get("quote", "")) for e in v.evidence if isinstance(e, dict) and e.get("quote")]
    if quotes:
        line += " Evidence: " + "; ".join(f"“{q}”" for q in quotes)
    return line


def _verdict_data(v: Verdict) -> dict[str, Any]:
    return v.model_dump(
        include={"turn_id", "turn_index", "applicable", "verdict", "score", "rationale",
                 "evidence", "error", "judgment_id"}
    )  # fmt: skip


def _answer(record: TranscriptRecord, verdicts: Sequence[Verdict], worst: str) -> str | None:
    """The reply that earned the worst verdict (the first such turn), for the viewer's answer."""
    turn = next((v.turn_id for v in verdicts if v.applicable and v.verdict == worst), None)
    return next((m.content for m in record.messages if m.turn_id == turn), None)


def _scores(record: TranscriptRecord) -> dict[str, Any]:
    from inspect_ai.scorer import Score

    groups: dict[str, list[Verdict]] = {}
    for v in record.verdicts:
        groups.setdefault(score_name(v), []).append(v)
    out = {}
    for name, vs in sorted(groups.items()):
        vs = sorted(vs, key=lambda v: (v.turn_index is None, v.turn_index or 0))
        first = vs[0]
        worst = worst_verdict(vs)
        out[name] = Score(
            value=worst,
            answer=_answer(record, vs, worst),
            explanation="\n".join(_turn_line(v) for v in vs),
            metadata={
                "judge": first.judge,
                "rubric_id": first.rubric_id,
                "rubric_hash": first.rubric_hash,
                "criterion_id": first.criterion_id,
                "risk_area": first.risk_area,
                "prompt_version": first.prompt_version,
                "turns": [_verdict_data(v) for v in vs],
            },
        )
    return out


def _messages(record: TranscriptRecord) -> list[Any]:
    from inspect_ai._util.content import ContentReasoning, ContentText
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser

    by_turn: dict[str, list[Verdict]] = {}
    for v in record.verdicts:
        if v.turn_id is not None:
            by_turn.setdefault(v.turn_id, []).append(v)
    out: list[Any] = []
    if record.system_prompt is not None:
        out.append(
            ChatMessageSystem(id=f"{record.conversation_id}:system", content=record.system_prompt)
        )
    for m in record.messages:
        meta: dict[str, Any] = {
            "turn_index": m.index, "exchange": m.exchange, "stage": m.stage,
            "fired": m.fired, "events": m.events, "branch_state": m.branch_state,
            "origin_turn_id": m.origin_turn_id, "shared_prefix": m.shared_prefix,
        }  # fmt: skip
        if m.role == "user":
            out.append(ChatMessageUser(id=m.turn_id, content=m.content, metadata=meta))
            continue
        meta["verdicts"] = {score_name(v): v.verdict for v in by_turn.get(m.turn_id, [])}
        content: Any = m.content
        if m.reasoning:
            content = [ContentReasoning(reasoning=m.reasoning), ContentText(text=m.content)]
        out.append(
            ChatMessageAssistant(
                id=m.turn_id, content=content, model=m.model or None, metadata=meta
            )
        )
    return out


def sample_metadata(record: TranscriptRecord) -> dict[str, Any]:
    """What a sample's metadata holds: the arm and where it sits in its tree."""
    return {
        "conversation_id": record.conversation_id,
        "run_id": record.run_id,
        "scenario_id": record.scenario_id,
        "scenario_path": record.scenario_path,
        "variant_id": record.variant_id,
        "choices": record.choices,
        "parent_id": record.fork.parent_id,
        "fork_turn": record.fork.fork_turn,
        "target": record.target,
        "condition": record.condition,
        "simulator": record.simulator,
        "replicate": record.replicate,
        "seed": record.seed,
        "status": record.status,
        "stop_reason": record.stop_reason,
        "realisation": [r.model_dump() for r in record.realisation],
    }


def to_sample(record: TranscriptRecord) -> EvalSample:
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ModelOutput

    messages = _messages(record)
    first_reply = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
    last = next((m for m in reversed(messages) if m.role == "assistant"), None)
    return EvalSample(
        id=record.conversation_id,
        epoch=1,
        input=messages[:first_reply] or "",
        target="",
        messages=messages,
        output=ModelOutput.from_content(record.target, last.text if last is not None else ""),
        scores=_scores(record) or None,
        metadata=sample_metadata(record),
    )


def _slug(text: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:40]
    return f"{clean}-{hashlib.sha256(text.encode()).hexdigest()[:6]}"


def _results(samples: Sequence[EvalSample]) -> Any:
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    worst = {scale.worst for scale in SCALES.values()}
    names = sorted({n for s in samples for n in (s.scores or {})})
    scores = []
    for name in names:
        values = [s.scores[name].value for s in samples if s.scores and name in s.scores]
        rated = [v for v in values if v not in (ERROR, NOT_APPLICABLE)]
        metrics = {
            "conversations_rated": EvalMetric(name="conversations_rated", value=len(rated)),
            "conversations_with_error_only": EvalMetric(
                name="conversations_with_error_only", value=sum(v == ERROR for v in values)
            ),
        }
        if rated:
            share = sum(v in worst for v in rated) / len(rated)
            metrics["share_worst_level"] = EvalMetric(name="share_worst_level", value=share)
        scores.append(EvalScore(name=name, scorer=name, scored_samples=len(rated), metrics=metrics))
    done = sum(1 for s in samples if s.metadata.get("status") == "completed")
    return EvalResults(total_samples=len(samples), completed_samples=done, scores=scores)


_STATUS: dict[str, Literal["success", "started"]] = {
    "completed": "success",
    "running": "started",
}


def build_log(run: Any, target: str, condition: str, samples: list[EvalSample]) -> EvalLog:
    """One log: the samples of one run x target x condition, the run's provenance in its spec."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSpec, EvalStats
    from inspect_ai.viewer import ViewerConfig

    from branchpoint.core.redaction import redact

    created = run.created_at.isoformat() if run.created_at else ""
    key = f"{run.id}|{target}|{condition}"
    spec = EvalSpec(
        eval_id=hashlib.sha256(key.encode()).hexdigest()[:22],
        run_id=run.id,
        created=created,
        task="branchpoint",
        task_display_name=f"{run.name or run.id} / {condition}",
        task_args={"condition": condition},
        dataset=EvalDataset(
            name=run.id, samples=len(samples), sample_ids=[str(s.id) for s in samples]
        ),
        model=target,
        config=EvalConfig(),
        # Model and persona text is data, never markup: the viewer shows it as plain text.
        viewer=ViewerConfig(trust_content=False),
        packages={"branchpoint": run.branchpoint_version or "unknown"},
        metadata={
            "branchpoint": redact(
                {
                    "run_id": run.id,
                    "run_kind": run.kind,
                    "run_name": run.name,
                    "run_status": run.status,
                    "branchpoint_version": run.branchpoint_version,
                    "target": target,
                    "condition": condition,
                    "config": run.config,
                }
            )
        },
    )
    return EvalLog(
        eval=spec,
        status=_STATUS.get(run.status, "cancelled"),
        samples=samples,
        results=_results(samples),
        stats=EvalStats(
            started_at=created,
            completed_at=run.updated_at.isoformat() if run.updated_at else "",
        ),
    )


def write_inspect_logs(
    store_or_db: Any,
    out_dir: str | os.PathLike[str],
    run: str | Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
) -> list[Path]:
    """Write one ``.eval`` log per run x target x condition into ``out_dir``; their paths."""
    _inspect()
    from inspect_ai.log import write_eval_log

    from branchpoint.analysis.export.formats import Redactor
    from branchpoint.analysis.export.tables import Conversations
    from branchpoint.core.read import find_run
    from branchpoint.core.store import Store, open_store

    own = not isinstance(store_or_db, Store)
    store = open_store(store_or_db, create=False) if own else store_or_db
    try:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        conv = Conversations(store, run)
        redactor = Redactor()
        written = []
        for (run_id, target, condition), group in conv.frame.groupby(
            ["run_id", "target", "condition"], sort=True
        ):
            records = iter_transcripts(
                store, rubric=rubric, judge=judge, only=list(group["conversation_id"]),
                conversations=conv, redactor=redactor,
            )  # fmt: skip
            samples = [to_sample(r) for r in records]
            log = build_log(find_run(store, run_id), redactor.text(target), condition, samples)
            path = out / f"{_slug(run_id)}_{_slug(target)}_{_slug(condition)}.eval"
            write_eval_log(log, path)
            written.append(path)
        return written
    finally:
        if own:
            store.close()
