"""Writing flat export tables as CSV, Parquet or JSON lines, a chunk at a time.

One rule for every flat table, whatever the format: the same columns in the same order; integer
columns stay integers (empty where missing), flags stay booleans; mappings and lists (choices,
branch state, fired branch points, events, evidence, panel members, the arms that carry a unit)
are JSON text, so a column has one type in every format and a CSV cell holds the whole value.
Every text cell passes through ``branchpoint.core.redaction`` on the way out: an API key that
reached a model's reply, an error message or a spec string is masked in the export as it is in the
store's configs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.core.redaction import env_secrets, redact_text

FLAT_FORMATS = ("csv", "parquet", "jsonl")

# Columns by type, across every export table (a column not named here is text).
INT_COLUMNS = frozenset(
    {
        "replicate", "seed", "n_turns", "fork_turn", "turn_index", "exchange", "tokens_in",
        "tokens_out", "retries", "realised_exchange", "n_realised", "n_arms",
    }
)  # fmt: skip
FLOAT_COLUMNS = frozenset({"score", "cost", "latency_s", "first_exchange"})
BOOL_COLUMNS = frozenset({"applicable", "shared_prefix", "realised", "recorded"})
JSON_COLUMNS = frozenset(
    {"choices", "branch_state", "fired", "events", "evidence", "members", "arms"}
)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v) or v is pd.NA


def _flag(v: Any) -> bool | None:
    if _missing(v):
        return None
    if isinstance(v, str):  # read back from CSV
        return {"true": True, "false": False}[v.strip().lower()]
    return bool(v)


def parse_json(value: Any, empty: Any) -> Any:
    """A JSON column's value as Python: text from a SQLite read, parsed from other databases."""
    if _missing(value):
        return empty
    if isinstance(value, str):
        return json.loads(value) if value else empty
    return value


def json_text(value: Any) -> str | None:
    """One canonical JSON text for a mapping or list column (None stays None)."""
    if _missing(value):
        return None
    parsed = json.loads(value) if isinstance(value, str) else value
    return json.dumps(parsed, sort_keys=True, ensure_ascii=False)


class Redactor:
    """``branchpoint.core.redaction.redact_text`` with the secrets looked up once per export."""

    def __init__(self) -> None:
        self.secrets = env_secrets()

    def text(self, value: Any) -> Any:
        return redact_text(value, self.secrets) if isinstance(value, str) else value


def _text(value: Any) -> str | None:
    return None if _missing(value) else str(value)


def per_distinct(column: pd.Series, fn: Callable[[Any], Any]) -> np.ndarray:
    """``fn`` of each cell, computed once per distinct value: a column of a million rows holds a
    few hundred targets, verdicts or choices, and copied turns repeat their text."""
    try:
        codes, uniques = pd.factorize(column, use_na_sentinel=True)
    except TypeError:  # parsed JSON (lists, dicts) from a database other than SQLite
        keyed = column.map(lambda v: json.dumps(v, sort_keys=True) if not _missing(v) else None)
        codes, uniques = pd.factorize(keyed, use_na_sentinel=True)
    originals = column.to_numpy(dtype=object)
    first = np.full(len(uniques), -1, np.int64)
    seen = codes >= 0
    first[codes[seen][::-1]] = np.flatnonzero(seen)[::-1]  # a row holding each distinct value
    mapped = np.array([fn(originals[i]) for i in first] + [fn(None)], dtype=object)
    return mapped[np.where(seen, codes, len(uniques))]


def typed(frame: pd.DataFrame, redactor: Redactor | None = None) -> pd.DataFrame:
    """The export types: nullable integers, floats, nullable booleans, JSON text, text; with a
    ``redactor``, every text and JSON text cell redacted."""
    out = frame.copy()
    for col in out.columns:
        if col in INT_COLUMNS:
            out[col] = pd.to_numeric(out[col], errors="coerce").astype("Int64")
        elif col in FLOAT_COLUMNS:
            out[col] = pd.to_numeric(out[col], errors="coerce").astype(float)
        elif col in BOOL_COLUMNS:
            out[col] = pd.array(per_distinct(out[col], _flag), dtype="boolean")
        else:
            convert: Callable[[Any], Any] = json_text if col in JSON_COLUMNS else _text
            if redactor is not None:
                convert = _redacting(convert, redactor)
            out[col] = pd.Series(per_distinct(out[col], convert), index=out.index, dtype=object)
    return out


def _redacting(convert: Callable[[Any], str | None], redactor: Redactor) -> Callable[[Any], Any]:
    return lambda v: redactor.text(convert(v))


def _arrow_schema(columns: Sequence[str]) -> Any:
    import pyarrow as pa

    def typ(c: str) -> Any:
        if c in INT_COLUMNS:
            return pa.int64()
        if c in FLOAT_COLUMNS:
            return pa.float64()
        if c in BOOL_COLUMNS:
            return pa.bool_()
        return pa.string()

    return pa.schema([(c, typ(c)) for c in columns])


def check_format(fmt: str) -> None:
    if fmt not in FLAT_FORMATS:
        raise ValueError(f"format must be one of {', '.join(FLAT_FORMATS)}, not {fmt!r}")


def write_chunks(
    chunks: Iterable[pd.DataFrame],
    out: str | os.PathLike[str],
    fmt: str,
    columns: Sequence[str],
) -> int:
    """Write typed, redacted chunks with exactly ``columns`` (missing ones empty); returns rows.

    A table with no rows still gets its header (CSV), its schema (Parquet) or an empty file
    (JSON lines), so that a script reading it needs no special case."""
    check_format(fmt)
    path = Path(out)
    redactor = Redactor()
    columns = list(columns)
    n = 0
    writer = None
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            schema = _arrow_schema(columns)
            writer = pq.ParquetWriter(str(path), schema)
        elif fmt == "csv":
            pd.DataFrame(columns=columns).to_csv(path, index=False)
        else:
            path.write_text("", encoding="utf-8")
        for chunk in chunks:
            frame = typed(chunk.reindex(columns=columns), redactor)
            if frame.empty:
                continue
            if fmt == "csv":
                frame.to_csv(path, index=False, header=False, mode="a")
            elif fmt == "jsonl":
                text = frame.to_json(orient="records", lines=True, force_ascii=False)
                with path.open("a", encoding="utf-8") as fh:
                    fh.write(text if text.endswith("\n") else text + "\n")
            else:
                import pyarrow as pa

                assert writer is not None
                writer.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False))
            n += len(frame)
    finally:
        if writer is not None:
            writer.close()
    return n


def read_export(path: str | os.PathLike[str], fmt: str | None = None) -> pd.DataFrame:
    """Read a flat export back with its types (what an analyst's ``pd.read_*`` gives, typed)."""
    p = Path(path)
    fmt = fmt or p.suffix.lstrip(".")
    check_format(fmt)
    if fmt == "parquet":
        frame = pd.read_parquet(p)
    elif fmt == "jsonl":
        frame = pd.read_json(p, lines=True, dtype=False) if p.stat().st_size else pd.DataFrame()
    else:
        frame = pd.read_csv(p, dtype=object, keep_default_na=False, na_values=[""])
    return typed(frame.replace({np.nan: None}))
