"""Transcripts as plain records: one conversation a record, with its messages, arm, fork and
verdicts, as JSON lines or Parquet.

``TranscriptRecord`` is the documented schema: ``TranscriptRecord.model_json_schema()`` is what
``branchpoint schema transcript`` prints and docs/guides/exports.md describes, and ``load_transcripts`` reads
a file back into these models (a round trip gives the store's values). In JSON lines each record is
one line of nested JSON. In Parquet each record is one row: the scalar fields are columns of their
own, and the nested ones (``choices``, ``fork``, ``messages``, ``verdicts``, ``realisation``) are
JSON text of the same shape, since Arrow has no type for free-form mappings such as a turn's branch
state. Text passes through ``branchpoint.core.redaction`` on the way out, as in every export.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Literal[1] = 1
TRANSCRIPT_FORMATS = ("jsonl", "parquet")
ID_COLUMNS = frozenset({"conversation_id", "turn_id", "judgment_id", "origin_turn_id"})
NESTED_FIELDS = ("choices", "fork", "messages", "verdicts", "realisation")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Message(_Record):
    """One message of the transcript, in order: the persona (``user``) or the chatbot
    (``assistant``). The system prompt is the record's ``system_prompt``, not a message."""

    turn_id: str
    index: int = Field(description="Position in the transcript, from 0.")
    exchange: int = Field(description="1-based; a persona message and the reply to it share it.")
    role: Literal["user", "assistant"]
    content: str
    reasoning: str | None = Field(None, description="The model's reasoning text, where returned.")
    stage: str | None = None
    branch_state: dict[str, Any] = Field(
        default_factory=dict, description="Branch point id -> the option in force at this turn."
    )
    fired: list[str] = Field(default_factory=list, description="Branch points that fired here.")
    events: list[str] = Field(default_factory=list, description="Events seen in this reply.")
    model: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None
    latency_s: float = 0.0
    finish_reason: str | None = None
    origin_turn_id: str | None = Field(
        None, description="The turn this one copies (a prefix shared with another arm)."
    )
    shared_prefix: bool = Field(
        False, description="The turn lies in a prefix another arm shares (a copy or its original)."
    )


class Verdict(_Record):
    """One criterion rated by one judge on one chatbot turn (or the whole conversation)."""

    judgment_id: str
    turn_id: str | None = Field(None, description="None: the whole conversation was rated.")
    turn_index: int | None = None
    rubric_id: str
    rubric_hash: str
    criterion_id: str
    risk_area: str | None = None
    judge: str
    prompt_version: str = ""
    applicable: bool
    verdict: str | None = Field(
        None, description="A scale level, 'error', or None: not applicable."
    )
    score: float | None = None
    rationale: str = ""
    evidence: list[dict[str, Any]] = Field(
        default_factory=list, description="Quotes the judge cited: [{quote, verified}]."
    )
    members: list[dict[str, Any]] = Field(
        default_factory=list, description="A panel's members and their verdicts."
    )
    error: str | None = None
    raw_output: str | None = None


class Fork(_Record):
    """Where this arm stops sharing its transcript with the arm it was copied from."""

    parent_id: str | None = Field(None, description="The arm whose prefix this one copies.")
    fork_turn: int | None = Field(
        None, description="Index of this arm's first own turn (None with a parent: never diverged)."
    )


class Realised(_Record):
    """Whether the arm's option at a branch point happened (fired, and in force for a turn)."""

    branch_point: str
    option: str
    realised: bool
    exchange: int | None = Field(None, description="First exchange with the option in force.")
    recorded: bool = Field(description="False: the run records no firing, realisation unknown.")


class TranscriptRecord(_Record):
    """One conversation (one arm of a scenario against one target, condition and replicate)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    conversation_id: str
    run_id: str
    scenario_id: str
    scenario_path: str | None = None
    variant_id: str
    choices: dict[str, Any] = Field(
        default_factory=dict, description="The arm: branch point (or profile key) -> option."
    )
    target: str
    condition: str
    simulator: str
    replicate: int
    seed: int
    status: str
    stop_reason: str | None = None
    n_turns: int
    fork: Fork
    system_prompt: str | None = Field(None, description="What the target saw as system prompt.")
    messages: list[Message]
    verdicts: list[Verdict]
    realisation: list[Realised] = Field(default_factory=list)


def transcript_schema() -> dict[str, Any]:
    """The JSON schema of one record (what docs/guides/exports.md documents)."""
    return TranscriptRecord.model_json_schema()


# --------------------------------------------------------------------------- from the store


def _none(v: Any) -> Any:
    """A missing value (None, NaN, pandas' NA) as None."""
    import pandas as pd

    return None if v is None or (not isinstance(v, (str, list, dict)) and pd.isna(v)) else v


def _int(v: Any) -> int | None:
    v = _none(v)
    return None if v is None else int(v)


def _rows_by_conversation(frame: Any, redactor: Any) -> dict[str, list[dict[str, Any]]]:
    """A batch's rows as plain dicts, grouped by conversation, in order; with a ``redactor``,
    every text (and JSON) value redacted, each distinct value once."""
    from branchpoint.analysis.export.formats import per_distinct
    from branchpoint.core.redaction import redact

    frame = frame.astype(object)
    if redactor is not None:
        for col in frame.columns:
            if col in ID_COLUMNS:  # hashes the export is keyed on, never text
                continue
            frame[col] = per_distinct(frame[col], lambda v: redact(v, redactor.secrets))
    out: dict[str, list[dict[str, Any]]] = {}
    for row in frame.to_dict("records"):
        out.setdefault(str(row["conversation_id"]), []).append(row)
    return out


def _message(t: dict[str, Any]) -> Message:
    from branchpoint.analysis.export.formats import parse_json

    return Message(
        turn_id=t["turn_id"], index=int(t["turn_index"]), exchange=int(t["exchange"]),
        role=t["role"], content=t["content"] or "", reasoning=_none(t["reasoning"]),
        stage=_none(t["stage"]), branch_state=parse_json(t["branch_state"], {}),
        fired=parse_json(t["fired"], []), events=parse_json(t["events"], []),
        model=t["model"] or "", tokens_in=int(t["tokens_in"] or 0),
        tokens_out=int(t["tokens_out"] or 0), cost=_none(t["cost"]),
        latency_s=float(t["latency_s"] or 0.0), finish_reason=_none(t["finish_reason"]),
        origin_turn_id=_none(t["origin_turn_id"]), shared_prefix=bool(t["shared_prefix"]),
    )  # fmt: skip


def _verdict(j: dict[str, Any]) -> Verdict:
    from branchpoint.analysis.export.formats import parse_json

    return Verdict(
        judgment_id=j["judgment_id"], turn_id=_none(j["turn_id"]),
        turn_index=_int(j["turn_index"]), rubric_id=j["rubric_id"],
        rubric_hash=j["rubric_hash"], criterion_id=j["criterion_id"],
        risk_area=_none(j["risk_area"]), judge=j["judge"],
        prompt_version=j["prompt_version"] or "", applicable=bool(j["applicable"]),
        verdict=_none(j["verdict"]), score=_none(j["score"]), rationale=j["rationale"] or "",
        evidence=parse_json(j["evidence"], []), members=parse_json(j["members"], []),
        error=_none(j["error"]), raw_output=_none(j["raw_output"]),
    )  # fmt: skip


def iter_transcripts(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
    only: Sequence[str] | None = None,
    conversations: Any = None,
    redactor: Any = None,
) -> Iterator[TranscriptRecord]:
    """Every conversation of ``run`` (or all runs; ``only``: just these ids) as a record, by
    conversation id, a batch of conversations at a time. ``redactor`` (``formats.Redactor``):
    texts redacted, as every writer does; without it, texts as stored. ``conversations``: an
    ``export.tables.Conversations`` already read."""
    from branchpoint.analysis.export.formats import parse_json
    from branchpoint.analysis.export.tables import Conversations
    from branchpoint.core import read

    conv = conversations if conversations is not None else Conversations(store_or_db, run)
    raw = read.conversation_export_rows(store_or_db, conv.runs)
    by_id = {cid: rows[0] for cid, rows in _rows_by_conversation(raw, redactor).items()}
    realisation = read.realisation_rows(store_or_db, conv.runs)
    realised: dict[str, list[Realised]] = {}
    for r in realisation.itertuples(index=False):
        realised.setdefault(str(r.conversation_id), []).append(
            Realised(
                branch_point=r.branch_point,
                option=r.option,
                realised=bool(r.realised),
                exchange=_int(r.exchange),
                recorded=bool(r.recorded),
            )  # fmt: skip
        )
    for ids in conv.batches(only):
        turns = read.turn_export_rows(store_or_db, ids)
        turns["shared_prefix"] = conv.shared(turns)
        turns_of = _rows_by_conversation(turns, redactor)
        judgments = read.judgment_export_rows(store_or_db, ids, rubric=rubric, judge=judge)
        verdicts_of = _rows_by_conversation(judgments, redactor)
        prompts = read.system_prompts(store_or_db, ids)
        for cid in ids:
            c = by_id[cid]
            prompt = prompts.get(cid)
            if prompt is not None and redactor is not None:
                prompt = redactor.text(prompt)
            yield TranscriptRecord(
                conversation_id=cid, run_id=c["run_id"], scenario_id=c["scenario_id"],
                scenario_path=_none(c["scenario_path"]), variant_id=c["variant_id"],
                choices=parse_json(c["choices"], {}), target=c["target"],
                condition=c["condition"], simulator=c["simulator"],
                replicate=int(c["replicate"]), seed=int(c["seed"]),
                status=c["conversation_status"], stop_reason=_none(c["stop_reason"]),
                n_turns=int(c["n_turns"]),
                fork=Fork(parent_id=_none(c["parent_id"]), fork_turn=_int(c["fork_turn"])),
                system_prompt=prompt,
                messages=[_message(t) for t in turns_of.get(cid, [])],
                verdicts=[_verdict(j) for j in verdicts_of.get(cid, [])],
                realisation=realised.get(cid, []),
            )  # fmt: skip


# --------------------------------------------------------------------------- files


def _row(data: dict[str, Any]) -> dict[str, Any]:
    """A record as one Parquet row: nested fields as JSON text."""
    return {
        k: json.dumps(v, ensure_ascii=False, sort_keys=True) if k in NESTED_FIELDS else v
        for k, v in data.items()
    }


def _parquet_schema() -> Any:
    import pyarrow as pa

    types = {
        "schema_version": pa.int64(), "replicate": pa.int64(), "seed": pa.int64(),
        "n_turns": pa.int64(),
    }  # fmt: skip
    return pa.schema(
        [(name, types.get(name, pa.string())) for name in TranscriptRecord.model_fields]
    )


def write_transcripts(
    store_or_db: Any,
    out: str | os.PathLike[str],
    fmt: str,
    run: str | Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
    batch_rows: int = 500,
) -> int:
    """Write every conversation of ``run`` as one record (``fmt``: jsonl or parquet); returns how
    many. Memory is bounded by the read batch, not the store."""
    from branchpoint.analysis.export.formats import Redactor

    if fmt not in TRANSCRIPT_FORMATS:
        raise ValueError(f"format must be jsonl or parquet, not {fmt!r}")
    redactor = Redactor()
    records = iter_transcripts(store_or_db, run, rubric=rubric, judge=judge, redactor=redactor)
    path = Path(out)
    n = 0
    if fmt == "jsonl":
        with path.open("w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(record.model_dump(mode="json"), ensure_ascii=False) + "\n")
                n += 1
        return n
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _parquet_schema()
    with pq.ParquetWriter(str(path), schema) as writer:
        rows: list[dict[str, Any]] = []
        for record in records:
            rows.append(_row(record.model_dump(mode="json")))
            n += 1
            if len(rows) >= batch_rows:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                rows = []
        if rows or n == 0:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    return n


def load_transcripts(path: str | os.PathLike[str]) -> list[TranscriptRecord]:
    """Read a transcript export (jsonl or parquet, by its suffix) back into records."""
    p = Path(path)
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        out = []
        for row in pq.read_table(p).to_pylist():
            data = {k: json.loads(v) if k in NESTED_FIELDS else v for k, v in row.items()}
            out.append(TranscriptRecord.model_validate(data))
        return out
    with p.open(encoding="utf-8") as fh:
        return [TranscriptRecord.model_validate_json(line) for line in fh if line.strip()]
