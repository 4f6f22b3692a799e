"""Tidy tables of the store, read through ``branchpoint.core.read`` (no ORM objects, so it scales).

Two shapes:

* ``judgment_table``: one row per judgment, joined with its conversation (scenario, variant, target,
  condition, simulator, replicate), its turn (index, exchange) and one column per variant choice
  (``choice:<key>``, e.g. ``choice:limit``, ``choice:profile:race``, ``choice:explicit_cue``).
  This is what ``branchpoint export`` writes.
* ``conversation_criterion_table``: one row per conversation x rubric x criterion x judge with the
  counts every analysis needs (ratings, fails, partials, errors, score sums). Counted by the
  database (or, on SQLite, by ``branchpoint.core.read.fast``) so that 15 million judgments never become Python
  objects; ``aggregate`` builds the same frame from a judgment table.

A rating counts (``rated``) when the criterion applied and the verdict is a scale level: a
not-applicable row and an ``error`` verdict are not ratings; errors are counted separately.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.core import read
from branchpoint.core.domain import REPLAY_ORIGIN, designed_run_id
from branchpoint.core.errors import UserError
from branchpoint.core.read.fast import (
    CHUNK_ROWS,  # looked up at each call: a test shrinks it to mix judges
)
from branchpoint.core.scales import ERROR, PASS_PARTIAL_FAIL

CHOICE_PREFIX = "choice:"
CONVERSATION_COLUMNS = [
    "conversation_id",
    "run_id",
    "scenario_id",
    "scenario_path",
    "variant_id",
    "target",
    "condition",
    "simulator",
    "replicate",
    "conversation_status",
]
# Scores of the pass/partial/fail scale, from the verdict itself, in every path. Other scales
# (the ED risk levels) are analysed from the judgment table by ``branchpoint.analysis.ed.responses``.
PPF_SCORES = PASS_PARTIAL_FAIL.scores
ERROR_VERDICT = ERROR


def choice_column(key: str) -> str:
    return CHOICE_PREFIX + key


def choice_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c.startswith(CHOICE_PREFIX)]


# --------------------------------------------------------------------------- runs


def group_codes(frame: pd.DataFrame, cols: Sequence[str], *, sort: bool = True) -> np.ndarray:
    """``frame.groupby(cols, sort=sort, dropna=False, observed=True).ngroup()``, from each
    column's codes combined into one integer (a pandas group-by of eight text columns took 0.1 s
    a call on a contrast of 400,000 rows). Groups are numbered in the order of their values
    (missing last), or of first appearance when ``sort`` is False."""
    if not cols or not len(frame):
        return np.zeros(len(frame), np.int64)
    parts, dims = [], []
    for col in cols:
        codes, uniques = pd.factorize(frame[col], sort=True, use_na_sentinel=False)
        parts.append(codes)
        dims.append(max(len(uniques), 1))
    if float(np.prod([float(d) for d in dims])) >= 2.0**62:  # too many combinations to number
        grouped = frame.groupby(list(cols), sort=sort, dropna=False, observed=True)
        return grouped.ngroup().to_numpy()
    key = np.ravel_multi_index(parts, dims)
    return pd.factorize(key, sort=sort)[0]  # hashed (np.unique sorts every row)


def list_runs(store_or_db: Any) -> pd.DataFrame:
    return read.run_table(store_or_db)


def resolve_runs(store_or_db: Any, run: str | Sequence[str] | None) -> list[str] | None:
    """Run ids to analyse: None means every designed run. Unknown ids are a user error.

    Replays (``branchpoint replay``, issue 47) are never counted in a designed contrast: their
    runs are left out of "every run", and naming one is a user error (the report lists them
    apart, beside the run they replay)."""
    table = list_runs(store_or_db)
    replays = set(table.loc[table["kind"] == REPLAY_ORIGIN, "id"])
    if run is None:
        return None if not replays else [r for r in table["id"] if r not in replays]
    wanted = [run] if isinstance(run, str) else list(run)
    known = set(table["id"])
    missing = [r for r in wanted if r not in known]
    if missing:
        hint = ", ".join(sorted(known)[:5]) or "none stored"
        raise UserError(f"run {missing[0]!r} is not in the store (runs: {hint})")
    named = [r for r in wanted if r in replays]
    if named:
        raise UserError(
            f"run {named[0]!r} holds replays, which no designed contrast counts: analyse or "
            f"report the run they replay ({designed_run_id(named[0])!r}), whose report lists "
            "them apart"
        )
    return wanted


# --------------------------------------------------------------------------- conversations


def conversation_table(store_or_db: Any, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per conversation with one ``choice:<key>`` column per choice key."""
    return expand_choices(read.conversation_rows(store_or_db, runs))


def expand_choices(conv: pd.DataFrame) -> pd.DataFrame:
    """Replace the JSON ``choices`` column by one column per key (missing key -> NaN)."""
    raw = conv.pop("choices") if "choices" in conv else pd.Series([None] * len(conv))
    # The same choices string repeats across targets and conditions: parse each distinct one once.
    parsed: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    for value in raw:
        if isinstance(value, dict):
            rows.append(value)
            continue
        key = value if isinstance(value, str) else ""
        if key not in parsed:
            parsed[key] = json.loads(key) if key else {}
        rows.append(parsed[key])
    keys = sorted({k for d in rows for k in d})
    for key in keys:
        conv[choice_column(key)] = pd.Series(
            [d.get(key) for d in rows], index=conv.index, dtype=object
        )
    return conv


# --------------------------------------------------------------------------- judgments


def judgment_table(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
    include_text: bool = False,
) -> pd.DataFrame:
    """One row per judgment, joined with its conversation, turn and variant choices.

    ``include_text`` adds the turn's content and reasoning (for reports); exports leave it out.
    """
    runs = resolve_runs(store_or_db, run)
    judg = read.judgment_rows(
        store_or_db, runs, rubric=rubric, judge=judge, include_text=include_text
    )
    conv = conversation_table(store_or_db, runs)
    out = judg.merge(conv, on="conversation_id", how="left", validate="many_to_one")
    out["applicable"] = out["applicable"].astype(bool)
    front = ["judgment_id", *CONVERSATION_COLUMNS]
    rest = [c for c in out.columns if c not in front]
    return out[front + rest]


def _rating_masks(verdict: pd.Series, applicable: pd.Series) -> dict[str, np.ndarray]:
    v = verdict.astype(object)
    is_error = (v == ERROR_VERDICT).to_numpy()
    has_level = v.notna().to_numpy() & ~is_error
    rated = applicable.astype(bool).to_numpy() & has_level
    return {
        "rated": rated,
        "fail": rated & (v == "fail").to_numpy(),
        "partial": rated & (v == "partial").to_numpy(),
        "error": is_error,
    }


AGG_KEYS = ["conversation_id", "rubric_id", "criterion_id", "risk_area", "judge"]


def aggregate(judgments: pd.DataFrame) -> pd.DataFrame:
    """Conversation x criterion counts from a judgment table (same shape as the SQL path)."""
    m = _rating_masks(judgments["verdict"], judgments["applicable"])
    score = judgments["verdict"].map(PPF_SCORES).to_numpy(dtype=float)
    scored = m["rated"] & ~np.isnan(score)
    work = judgments[AGG_KEYS].copy()
    work["risk_area"] = work["risk_area"].fillna("")
    work["n_rated"] = m["rated"].astype(np.int64)
    work["n_fail"] = m["fail"].astype(np.int64)
    work["n_partial"] = m["partial"].astype(np.int64)
    work["n_error"] = m["error"].astype(np.int64)
    work["n_other"] = (m["rated"] & ~judgments["verdict"].isin(list(PPF_SCORES)).to_numpy()).astype(
        np.int64
    )
    work["score_sum"] = np.where(scored, score, 0.0)
    work["n_scored"] = scored.astype(np.int64)
    agg = work.groupby(AGG_KEYS, sort=False, observed=True).sum().reset_index()
    conv_cols = [
        c for c in judgments.columns if c in CONVERSATION_COLUMNS or c.startswith(CHOICE_PREFIX)
    ]
    conv = judgments[conv_cols].drop_duplicates("conversation_id")
    out = agg.merge(conv, on="conversation_id", how="left")
    out["risk_area"] = out["risk_area"].replace("", np.nan)
    return finish_aggregate(out)


def finish_aggregate(out: pd.DataFrame) -> pd.DataFrame:
    """The count columns as integers (score sums as floats) and the key columns as text."""
    for col in ("n_rated", "n_fail", "n_partial", "n_error", "n_other", "n_scored"):
        out[col] = out[col].astype(np.int64)
    out["score_sum"] = out["score_sum"].astype(float)
    for col in ("target", "condition", "scenario_id", "criterion_id", "judge", "simulator"):
        if col in out:
            out[col] = out[col].astype(str)
    return out


def conversation_criterion_table(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
    fast: bool = True,
    progress: Any = None,
) -> pd.DataFrame:
    """Conversation x criterion x judge counts.

    SQLite stores are read column-wise (``branchpoint.core.read.fast``); other databases aggregate with SQL
    ``GROUP BY`` (``fast=False`` forces that path on SQLite too; tests check both agree).
    ``progress(done, total)`` is called after each chunk of rows.
    """
    runs = resolve_runs(store_or_db, run)
    path = read.sqlite_path(store_or_db)
    if path is not None and fast:
        agg = read.sqlite_criterion_counts(path, progress, chunk_rows=CHUNK_ROWS)
        conv = conversation_table(store_or_db, runs)
        if runs is not None:
            agg = agg[agg["conversation_id"].isin(set(conv["conversation_id"]))]
        if rubric is not None:
            agg = agg[agg["rubric_id"] == rubric]
        if judge is not None:
            agg = agg[agg["judge"] == judge]
        out = agg.merge(conv, on="conversation_id", how="inner", validate="many_to_one")
        return finish_aggregate(out.reset_index(drop=True))
    agg = read.criterion_counts(store_or_db, runs, rubric=rubric, judge=judge, scores=PPF_SCORES)
    for col in ("n_rated", "n_fail", "n_partial", "n_error", "n_other", "n_scored"):
        agg[col] = agg[col].fillna(0)
    conv = conversation_table(store_or_db, runs)
    out = agg.merge(conv, on="conversation_id", how="left", validate="many_to_one")
    return finish_aggregate(out)


def distinct_conversation_counts(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
) -> pd.DataFrame:
    """``conversation_criterion_table`` under the unit of analysis: a turn that several arms
    carry is counted once, in the arm that produced it (``branchpoint.core.read.units``), so the
    rows sum to the rate tables' counts; an arm that never forked has no row of its own."""
    runs = resolve_runs(store_or_db, run)
    tree = read.conversation_tree(store_or_db, runs)
    if tree.empty or not tree["parent_id"].notna().any():
        return conversation_criterion_table(store_or_db, runs, rubric=rubric, judge=judge)
    jt = judgment_table(store_or_db, runs, rubric=rubric, judge=judge)
    if jt.empty:
        return conversation_criterion_table(store_or_db, runs, rubric=rubric, judge=judge)
    return aggregate(read.distinct_ratings(read.with_tree(jt, store_or_db, runs)))


def as_conversation_frame(data: pd.DataFrame) -> pd.DataFrame:
    """Accept either shape: a judgment table is aggregated, an aggregate is returned as is."""
    from branchpoint.analysis.pairing.forks import PostForkCounts

    if isinstance(data, PostForkCounts):
        return data.cc
    if "n_rated" in data.columns:
        return data
    if "verdict" in data.columns:
        return aggregate(data)
    raise ValueError("expected a judgment table or a conversation x criterion table")


EXPORT_INT = ("turn_index", "exchange", "replicate", "n_turns")
EXPORT_FLOAT = ("score",)
EXPORT_BOOL = ("applicable",)


def _export_schema(columns: Sequence[str]) -> Any:
    import pyarrow as pa

    def typ(c: str) -> Any:
        if c in EXPORT_INT:
            return pa.int64()
        if c in EXPORT_FLOAT:
            return pa.float64()
        if c in EXPORT_BOOL:
            return pa.bool_()
        return pa.string()

    return pa.schema([(c, typ(c)) for c in columns])


def _for_arrow(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    for c in out.columns:
        if c in EXPORT_INT or c in EXPORT_FLOAT or c in EXPORT_BOOL:
            continue
        out[c] = (
            out[c]
            .map(lambda v: None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v))
            .astype(object)
        )
    return out


def export_judgments(
    store_or_db: Any,
    out: str | os.PathLike[str],
    fmt: str,
    run: str | Sequence[str] | None = None,
    *,
    rubric: str | None = None,
    judge: str | None = None,
    chunksize: int = 250_000,
) -> int:
    """Write the judgment table chunk by chunk (bounded memory at any store size); returns rows."""
    if fmt not in ("csv", "parquet"):
        raise ValueError(f"format must be csv or parquet, not {fmt!r}")
    runs = resolve_runs(store_or_db, run)
    conv = conversation_table(store_or_db, runs)
    # SQLite: in the order they were written, chunk by chunk; other databases: one read.
    chunks = read.iter_judgment_rows(
        store_or_db, runs, rubric=rubric, judge=judge, chunksize=chunksize
    )
    n = 0
    writer = None
    try:
        columns: list[str] | None = None
        for chunk in chunks:
            frame = chunk.merge(conv, on="conversation_id", how="left")
            frame["applicable"] = frame["applicable"].astype(bool)
            front = ["judgment_id", *CONVERSATION_COLUMNS]
            frame = frame[front + [c for c in frame.columns if c not in front]]
            if columns is None:
                columns = list(frame.columns)
            frame = frame.reindex(columns=columns)
            if fmt == "csv":
                frame.to_csv(out, index=False, mode="w" if n == 0 else "a", header=n == 0)
            else:
                import pyarrow as pa
                import pyarrow.parquet as pq

                schema = _export_schema(columns)
                if writer is None:
                    writer = pq.ParquetWriter(str(out), schema)
                writer.write_table(
                    pa.Table.from_pandas(_for_arrow(frame), schema=schema, preserve_index=False)
                )
            n += len(frame)
        if n == 0:  # still write a file with the header, so a script can rely on it
            empty = judgment_table(store_or_db, runs, rubric=rubric, judge=judge)
            export_table(empty, out, fmt)
    finally:
        if writer is not None:
            writer.close()
        chunks.close()  # the read-only connection, when a write failed half way
    return n


def export_table(frame: pd.DataFrame, out: str | os.PathLike[str], fmt: str) -> None:
    """Write a table as CSV or Parquet. Object columns of mixed types become strings for Parquet."""
    if fmt == "csv":
        frame.to_csv(out, index=False)
    elif fmt == "parquet":
        clean = frame.copy()
        for col in clean.columns:
            if clean[col].dtype == object:
                clean[col] = clean[col].map(lambda v: None if v is None or v is np.nan else str(v))
        clean.to_parquet(out, index=False)
    else:  # the command validates the choice; this guards the Python API
        raise ValueError(f"format must be csv or parquet, not {fmt!r}")


def human_label_table(store_or_db: Any, run: str | Sequence[str] | None = None) -> pd.DataFrame:
    """Human labels (the TUI's output) on the same key as judgments."""
    return read.human_label_rows(store_or_db, resolve_runs(store_or_db, run))


def turn_table(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    role: str | None = "assistant",
    with_reasoning: bool = False,
) -> pd.DataFrame:
    """Turns with their text and reasoning (for reasoning-trace analysis and report excerpts)."""
    runs = resolve_runs(store_or_db, run)
    return read.turn_rows(store_or_db, runs, role=role, with_reasoning=with_reasoning)
