"""Tidy tables read straight from the store with SQL (no ORM objects, so it scales).

Two shapes:

* ``judgment_table``: one row per judgment, joined with its conversation (scenario, variant, target,
  condition, simulator, replicate), its turn (index, exchange) and one column per variant choice
  (``choice:<key>``, e.g. ``choice:limit``, ``choice:profile:race``, ``choice:explicit_cue``).
  This is what ``branchpoint export`` writes.
* ``conversation_criterion_table``: one row per conversation x rubric x criterion x judge with the
  counts every analysis needs (ratings, fails, partials, errors, score sums). Built with a SQL
  ``GROUP BY`` so that 15 million judgments never become Python objects; ``aggregate`` builds the
  same frame from a judgment table.

A rating counts (``rated``) when the criterion applied and the verdict is a scale level: a
not-applicable row and an ``error`` verdict are not ratings; errors are counted separately.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

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
# (the ED risk levels) are analysed from the judgment table by ``analysis.ed``.
PPF_SCORES = {"pass": 1.0, "partial": 0.5, "fail": 0.0}
PPF_SCORE_SQL = (
    "CASE j.verdict WHEN 'pass' THEN 1.0 WHEN 'partial' THEN 0.5 WHEN 'fail' THEN 0.0 END"
)
ERROR_VERDICT = "error"


def choice_column(key: str) -> str:
    return CHOICE_PREFIX + key


def choice_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c.startswith(CHOICE_PREFIX)]


# --------------------------------------------------------------------------- connections


def _sqlite_path(store_or_db: Any) -> str | None:
    """The file behind a store, a path or a sqlite URL; None for other databases."""
    url = getattr(store_or_db, "url", None)
    if url is None:
        if isinstance(store_or_db, (str, os.PathLike)):
            from core.store import resolve_url

            url = resolve_url(store_or_db)
        else:
            return None
    url = str(url)
    if url.startswith("sqlite:///"):
        return url.removeprefix("sqlite:///")
    return None


def _connect(store_or_db: Any) -> tuple[Any, bool]:
    """A DB-API connection or SQLAlchemy engine to read from; True when we must close it.

    SQLite files are read with the standard ``sqlite3`` module in read-only mode: faster than
    going through SQLAlchemy and it cannot write to (or lock) a store a sweep is writing.
    """
    path = _sqlite_path(store_or_db)
    if path is not None:
        from core.errors import UserError

        if not os.path.exists(path):
            raise UserError(f"{path}: no such store (run `branchpoint run` first, or pass --db)")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=30000")
        return conn, True
    engine = getattr(store_or_db, "engine", None)
    if engine is None:
        from core.store import open_store

        store = open_store(store_or_db, create=False)
        return store.engine, False
    return engine, False


def _read_sql(sql: str, store_or_db: Any, params: Sequence[Any] = ()) -> pd.DataFrame:
    conn, close = _connect(store_or_db)
    try:
        if isinstance(conn, sqlite3.Connection):
            return pd.read_sql_query(sql, conn, params=tuple(params))
        from sqlalchemy import text

        # Positional ``?`` placeholders become named ones for SQLAlchemy.
        named: dict[str, Any] = {}
        parts = sql.split("?")
        out = parts[0]
        for i, part in enumerate(parts[1:]):
            named[f"p{i}"] = params[i]
            out += f":p{i}" + part
        with conn.connect() as c:
            return pd.read_sql_query(text(out), c, params=named)
    finally:
        if close:
            conn.close()


# --------------------------------------------------------------------------- runs


def list_runs(store_or_db: Any) -> pd.DataFrame:
    return _read_sql(
        "SELECT id, kind, name, status, created_at FROM runs ORDER BY created_at", store_or_db
    )


def resolve_runs(store_or_db: Any, run: str | Sequence[str] | None) -> list[str] | None:
    """Run ids to analyse: None means every run. Unknown ids are a user error."""
    if run is None:
        return None
    wanted = [run] if isinstance(run, str) else list(run)
    known = set(list_runs(store_or_db)["id"])
    missing = [r for r in wanted if r not in known]
    if missing:
        from core.errors import UserError

        hint = ", ".join(sorted(known)[:5]) or "none stored"
        raise UserError(f"run {missing[0]!r} is not in the store (runs: {hint})")
    return wanted


def _where(
    runs: Sequence[str] | None, rubric: str | None, judge: str | None
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if runs is not None:
        clauses.append(f"c.run_id IN ({','.join('?' * len(runs))})")
        params.extend(runs)
    if rubric is not None:
        clauses.append("j.rubric_id = ?")
        params.append(rubric)
    if judge is not None:
        clauses.append("j.judge = ?")
        params.append(judge)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


# --------------------------------------------------------------------------- conversations


def conversation_table(store_or_db: Any, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per conversation with one ``choice:<key>`` column per choice key."""
    where = ""
    params: list[Any] = []
    if runs is not None:
        where = f" WHERE c.run_id IN ({','.join('?' * len(runs))})"
        params = list(runs)
    conv = _read_sql(
        "SELECT c.id AS conversation_id, c.run_id, c.scenario_id, c.scenario_path, c.variant_id, "
        "c.target, c.condition, c.simulator, c.replicate, c.status AS conversation_status, "
        "c.n_turns, c.choices FROM conversations c" + where,
        store_or_db,
        params,
    )
    return expand_choices(conv)


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
    where, params = _where(runs, rubric, judge)
    text_cols = ", t.content AS turn_content, t.reasoning AS turn_reasoning" if include_text else ""
    sql = (
        "SELECT j.id AS judgment_id, j.conversation_id, j.turn_id, j.turn_index, t.exchange, "
        "t.role AS turn_role, j.rubric_id, j.rubric_hash, j.criterion_id, j.risk_area, j.judge, "
        "j.prompt_version, j.applicable, j.verdict, j.score" + text_cols + " "
        "FROM judgments j JOIN conversations c ON c.id = j.conversation_id "
        "LEFT JOIN turns t ON t.id = j.turn_id" + where
    )
    judg = _read_sql(sql, store_or_db, params)
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
    return _finish_agg(out)


def _finish_agg(out: pd.DataFrame) -> pd.DataFrame:
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

    SQLite stores are read column-wise (``_fast_counts``); other databases aggregate with SQL
    ``GROUP BY`` (``fast=False`` forces that path on SQLite too; tests check both agree).
    ``progress(done, total)`` is called after each chunk of rows.
    """
    runs = resolve_runs(store_or_db, run)
    path = _sqlite_path(store_or_db)
    if path is not None and fast:
        agg = _fast_counts(path, progress)
        conv = conversation_table(store_or_db, runs)
        if runs is not None:
            agg = agg[agg["conversation_id"].isin(set(conv["conversation_id"]))]
        if rubric is not None:
            agg = agg[agg["rubric_id"] == rubric]
        if judge is not None:
            agg = agg[agg["judge"] == judge]
        out = agg.merge(conv, on="conversation_id", how="inner", validate="many_to_one")
        return _finish_agg(out.reset_index(drop=True))
    where, params = _where(runs, rubric, judge)
    rated = "(j.applicable AND j.verdict IS NOT NULL AND j.verdict <> 'error')"

    def count_if(condition: str) -> str:  # portable: PostgreSQL cannot SUM booleans
        return f"SUM(CASE WHEN {condition} THEN 1 ELSE 0 END)"

    counts = {
        "n_rated": rated,
        "n_fail": rated + " AND j.verdict = 'fail'",
        "n_partial": rated + " AND j.verdict = 'partial'",
        "n_error": "j.verdict = 'error'",
        "n_other": rated + " AND j.verdict NOT IN ('pass', 'partial', 'fail')",
        "n_scored": f"{rated} AND ({PPF_SCORE_SQL}) IS NOT NULL",
    }
    sql = (
        # risk_area follows from the criterion; MAX() only satisfies databases that check grouping.
        "SELECT j.conversation_id, j.rubric_id, j.criterion_id, MAX(j.risk_area) AS risk_area, j.judge, "
        + "".join(f"{count_if(cond)} AS {name}, " for name, cond in counts.items())
        + f"COALESCE(SUM(CASE WHEN {rated} THEN {PPF_SCORE_SQL} END), 0.0) AS score_sum "
        "FROM judgments j JOIN conversations c ON c.id = j.conversation_id" + where + " "
        "GROUP BY j.conversation_id, j.rubric_id, j.criterion_id, j.judge"
    )
    agg = _read_sql(sql, store_or_db, params)
    for col in ("n_rated", "n_fail", "n_partial", "n_error", "n_other", "n_scored"):
        agg[col] = agg[col].fillna(0)
    conv = conversation_table(store_or_db, runs)
    out = agg.merge(conv, on="conversation_id", how="left", validate="many_to_one")
    return _finish_agg(out)


CHUNK_ROWS = 1_000_000
READ_THREADS = 4  # three index/table scans in parallel; sqlite3 releases the GIL while it scans


_VERDICT_CHAR_SQL = (
    "CASE WHEN verdict = 'error' THEN 'e' WHEN verdict IS NULL OR NOT ifnull(applicable, 0) THEN 'n' "
    "WHEN verdict = 'fail' THEN 'f' WHEN verdict = 'partial' THEN 'q' WHEN verdict = 'pass' THEN 'p' ELSE 'o' END"
)


def _rowid_lists(path: str, column: str, index: str) -> tuple[list[Any], list[np.ndarray]]:
    """Distinct values of an indexed column and the rowids holding each (an index-only scan)."""
    import warnings

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        names = {r[1] for r in conn.execute("PRAGMA index_list(judgments)")}
        hint = f" INDEXED BY {index}" if index in names else ""
        rows = conn.execute(
            f"SELECT {column}, group_concat(rowid) FROM judgments{hint} GROUP BY {column}"
        ).fetchall()
    finally:
        conn.close()
    values, ids = [], []
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", DeprecationWarning
        )  # np.fromstring's text mode is the fast parser
        for value, text in rows:
            values.append(value)
            ids.append(np.fromstring(text, dtype=np.int64, sep=","))
    return values, ids


def _conversation_rowids(path: str) -> tuple[list[Any], list[np.ndarray]]:
    """Rowids of each conversation's judgments: ranges when contiguous (the usual case: a judge
    writes one conversation at a time), explicit lists only for the interleaved ones."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        names = {r[1] for r in conn.execute("PRAGMA index_list(judgments)")}
        hint = (
            " INDEXED BY ix_judgments_conversation_id"
            if "ix_judgments_conversation_id" in names
            else ""
        )
        rows = conn.execute(
            f"SELECT conversation_id, MIN(rowid), MAX(rowid), COUNT(*) FROM judgments{hint} GROUP BY conversation_id"
        ).fetchall()
        values, ids, scattered = [], [], []
        for cid, lo, hi, n in rows:
            values.append(cid)
            if hi - lo + 1 == n:
                ids.append(np.arange(lo, hi + 1, dtype=np.int64))
            else:
                ids.append(None)
                scattered.append(len(values) - 1)
        for i in scattered:
            got = conn.execute(
                f"SELECT rowid FROM judgments{hint} WHERE conversation_id = ?", (values[i],)
            ).fetchall()
            ids[i] = np.fromiter((r[0] for r in got), dtype=np.int64, count=len(got))
        return values, ids
    finally:
        conn.close()


def _verdict_scan(path: str, lo: int, hi: int) -> list[tuple[np.ndarray, np.ndarray, list[str]]]:
    """Per chunk of rowids: verdict codes (one byte per row) and the (rubric, judge) of each row."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    out = []
    try:
        for start in range(lo, hi + 1, CHUNK_ROWS):
            stop = min(start + CHUNK_ROWS - 1, hi)
            text, r0, r1, j0, j1 = conn.execute(
                f"SELECT group_concat({_VERDICT_CHAR_SQL}, ''), min(rubric_id), max(rubric_id), min(judge), max(judge) "
                "FROM judgments WHERE rowid BETWEEN ? AND ?",
                (start, stop),
            ).fetchone()
            if text is None:
                continue
            codes = np.frombuffer(text.encode("ascii"), np.uint8)
            if r0 == r1 and j0 == j1:  # the usual case: one rubric and judge per stretch of rows
                out.append((codes, np.zeros(len(codes), np.int32), [f"{r0}\x02{j0}"]))
            else:
                joined = conn.execute(
                    "SELECT group_concat(rubric_id || char(2) || judge, char(1)) FROM judgments WHERE rowid BETWEEN ? AND ?",
                    (start, stop),
                ).fetchone()[0]
                rj_codes, rj_vals = pd.factorize(np.array(joined.split("\x01"), dtype=object))
                out.append((codes, rj_codes.astype(np.int32), [str(v) for v in rj_vals]))
    finally:
        conn.close()
    return out


def _fast_counts(path: str, progress: Any = None) -> pd.DataFrame:
    """Conversation x (rubric, criterion, judge) counts from a SQLite store, without a SQL sort.

    Three scans run in parallel threads (sqlite3 releases the GIL): the conversation and criterion
    indexes give, for each value, the rowids holding it (index-only scans); one table scan gives
    one byte per row for the verdict (``group_concat`` of a CASE) plus the rubric and judge. numpy
    then counts by rowid. No Python object per judgment, and no ``GROUP BY`` that would sort
    15 million rows. Pass/partial/fail scores are the scale's 1 / 0.5 / 0.
    """
    from concurrent.futures import ThreadPoolExecutor

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        lo, hi = conn.execute("SELECT MIN(rowid), MAX(rowid) FROM judgments").fetchone()
    finally:
        conn.close()
    empty = pd.DataFrame(
        columns=[
            "conversation_id",
            *AGG_KEYS[1:],
            "n_rated",
            "n_fail",
            "n_partial",
            "n_error",
            "n_other",
            "score_sum",
            "n_scored",
        ]
    )
    if lo is None:
        return empty
    mid = (lo + hi) // 2
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        f_conv = pool.submit(_conversation_rowids, path)
        f_crit = pool.submit(_rowid_lists, path, "criterion_id", "ix_judgments_criterion_id")
        f_v1 = pool.submit(_verdict_scan, path, lo, mid)
        f_v2 = pool.submit(_verdict_scan, path, mid + 1, hi)
        conv_vals, conv_ids = f_conv.result()
        crit_vals, crit_ids = f_crit.result()
        chunks = f_v1.result() + f_v2.result()
    if progress is not None:
        progress(hi - lo + 1, hi - lo + 1)
    size = hi - lo + 1
    conv_at = np.full(size, -1, np.int32)
    for code, ids in enumerate(conv_ids):
        conv_at[ids - lo] = code
    crit_at = np.full(size, -1, np.int32)
    for code, ids in enumerate(crit_ids):
        crit_at[ids - lo] = code
    present = conv_at >= 0
    verd = np.concatenate([c for c, _, _ in chunks]) if chunks else np.zeros(0, np.uint8)
    rj_index: dict[str, int] = {}
    rj_parts = []
    for _, local, names in chunks:
        lut = np.array([rj_index.setdefault(n, len(rj_index)) for n in names], dtype=np.int64)
        rj_parts.append(lut[local])
    rj = np.concatenate(rj_parts) if rj_parts else np.zeros(0, np.int64)
    rj_vals = list(rj_index)
    if int(present.sum()) != len(verd) or not (crit_at[present] >= 0).all():
        from core.errors import UserError

        raise UserError(
            "the store's judgments changed while they were read (a judge is writing); run again"
        )
    conv = conv_at[present].astype(np.int64)
    crit = crit_at[present].astype(np.int64)
    rated = np.isin(verd, np.frombuffer(b"fqpo", np.uint8))
    fail = verd == ord("f")
    partial = verd == ord("q")
    is_err = verd == ord("e")
    score_of = np.select([fail, partial, verd == ord("p")], [0.0, 0.5, 1.0], np.nan)
    scored = ~np.isnan(score_of)
    n_k, n_rj = len(crit_vals), len(rj_vals)
    key = (conv * n_rj + rj) * n_k + crit
    uniq, inv = np.unique(key, return_inverse=True)

    def count(mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        w = mask.astype(np.float64) if weights is None else np.where(mask, weights, 0.0)
        return np.bincount(inv, weights=w, minlength=len(uniq))

    k_crit = uniq % n_k
    k_rj = (uniq // n_k) % n_rj
    k_conv = uniq // (n_k * n_rj)
    rj_split = [str(v).split("\x02", 1) for v in rj_vals]
    rub_v = np.array([r for r, _ in rj_split], dtype=object)[k_rj]
    judge_v = np.array([j for _, j in rj_split], dtype=object)[k_rj]
    crit_v = np.array(crit_vals, dtype=object)[k_crit]
    risk = _risk_areas(path, sorted({(r, c) for r, c in zip(rub_v, crit_v)}))
    return pd.DataFrame(
        {
            "conversation_id": np.array(conv_vals, dtype=object)[k_conv],
            "rubric_id": rub_v,
            "criterion_id": crit_v,
            "risk_area": [risk.get((r, c)) for r, c in zip(rub_v, crit_v)],
            "judge": judge_v,
            "n_rated": count(rated).astype(np.int64),
            "n_fail": count(fail).astype(np.int64),
            "n_partial": count(partial).astype(np.int64),
            "n_error": count(is_err).astype(np.int64),
            "n_other": count(verd == ord("o")).astype(np.int64),
            "score_sum": count(scored, np.nan_to_num(score_of)),
            "n_scored": count(scored).astype(np.int64),
        }
    )


def _risk_areas(path: str, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """Risk area of each (rubric, criterion), through the criterion index (one row each)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        out = {}
        for rubric, crit in pairs:
            got = conn.execute(
                "SELECT risk_area FROM judgments WHERE criterion_id = ? AND rubric_id = ? AND risk_area IS NOT NULL LIMIT 1",
                (crit, rubric),
            ).fetchone()
            out[(rubric, crit)] = got[0] if got else None
        return out
    finally:
        conn.close()


def as_conversation_frame(data: pd.DataFrame) -> pd.DataFrame:
    """Accept either shape: a judgment table is aggregated, an aggregate is returned as is."""
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
    where, params = _where(runs, rubric, judge)
    sql = (
        "SELECT j.id AS judgment_id, j.conversation_id, j.turn_id, j.turn_index, t.exchange, "
        "t.role AS turn_role, j.rubric_id, j.rubric_hash, j.criterion_id, j.risk_area, j.judge, "
        "j.prompt_version, j.applicable, j.verdict, j.score "
        "FROM judgments j JOIN conversations c ON c.id = j.conversation_id "
        "LEFT JOIN turns t ON t.id = j.turn_id" + where + " ORDER BY j.rowid"
    )
    conn, close = _connect(store_or_db)
    n = 0
    writer = None
    try:
        if isinstance(conn, sqlite3.Connection):
            chunks = pd.read_sql_query(sql, conn, params=tuple(params), chunksize=chunksize)
        else:  # other databases: one read (the SQLAlchemy path has no cheap server-side chunks here)
            chunks = iter([_read_sql(sql.replace(" ORDER BY j.rowid", ""), store_or_db, params)])
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
        if close:
            conn.close()
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
    runs = resolve_runs(store_or_db, run)
    where, params = "", []
    if runs is not None:
        where = f" WHERE c.run_id IN ({','.join('?' * len(runs))})"
        params = list(runs)
    return _read_sql(
        "SELECT h.conversation_id, h.turn_id, h.turn_index, h.rubric_id, h.criterion_id, h.annotator, h.verdict "
        "FROM human_labels h JOIN conversations c ON c.id = h.conversation_id" + where,
        store_or_db,
        params,
    )


def turn_table(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    role: str | None = "assistant",
    with_reasoning: bool = False,
) -> pd.DataFrame:
    """Turns with their text and reasoning (for reasoning-trace analysis and report excerpts)."""
    runs = resolve_runs(store_or_db, run)
    clauses, params = [], []
    if runs is not None:
        clauses.append(f"c.run_id IN ({','.join('?' * len(runs))})")
        params.extend(runs)
    if role is not None:
        clauses.append("t.role = ?")
        params.append(role)
    if with_reasoning:
        clauses.append("t.reasoning IS NOT NULL AND t.reasoning <> ''")
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    return _read_sql(
        'SELECT t.id AS turn_id, t.conversation_id, t."index" AS turn_index, t.exchange, t.role, t.content, '
        "t.reasoning, c.target, c.condition, c.scenario_id FROM turns t JOIN conversations c ON c.id = t.conversation_id"
        + where,
        store_or_db,
        params,
    )
