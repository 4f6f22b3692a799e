"""Conversation x criterion counts from a SQLite store without a SQL sort: the fast path that
analysing 15 million judgments needs (``benchmarks/analysis_scale.py``).

Three scans run in parallel threads (sqlite3 releases the GIL while it scans): the conversation and
criterion indexes give, for each value, the rowids holding it (index-only scans); one table scan
gives one byte per row for the verdict (``group_concat`` of a CASE) plus the rubric and judge.
numpy then counts by rowid. No Python object per judgment, and no ``GROUP BY`` that would sort
15 million rows. The result equals ``judgments.criterion_counts`` (tests check it).

SQLite only: it relies on rowids and ``INDEXED BY``. The queries are still built from the records;
this module's compiler writes the index hint (SQLAlchemy's SQLite compiler drops it) and inlines
the queries' constants.
"""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import Column, String, bindparam, column, func, select, table

from branchpoint.core.errors import UserError
from branchpoint.core.read.schema import JUDGMENT_ROWID, JUDGMENTS
from branchpoint.core.read.sqlite_file import Query, SQLiteQuery, prepare_sqlite, readonly_sqlite
from branchpoint.core.read.verdict_sql import (
    FAIL,
    FAST_DIALECT,
    PARTIAL,
    PASS,
    RJ_SEP,
    ROW_SEP,
    verdict_code,
)
from branchpoint.core.scales import PASS_PARTIAL_FAIL

if TYPE_CHECKING:
    import pandas as pd

CHUNK_ROWS = 1_000_000
READ_THREADS = 4  # three index/table scans in parallel; sqlite3 releases the GIL while it scans
COUNT_KEYS = ["conversation_id", "rubric_id", "criterion_id", "risk_area", "judge"]
COUNT_COLUMNS = [
    "n_rated",
    "n_fail",
    "n_partial",
    "n_error",
    "n_other",
    "score_sum",
    "n_scored",
]

J = JUDGMENTS.c


VERDICT_CODE = verdict_code(J.verdict, J.applicable)
RATED_CODES = np.frombuffer(b"fqpo", np.uint8)
SCORE_OF_CODE = {
    ord("f"): PASS_PARTIAL_FAIL.scores[FAIL],
    ord("q"): PASS_PARTIAL_FAIL.scores[PARTIAL],
    ord("p"): PASS_PARTIAL_FAIL.scores[PASS],
}

_SQLITE_MASTER = table(
    "sqlite_master", column("type", String), column("name", String), column("tbl_name", String)
)


def _prepare(stmt: Query) -> SQLiteQuery:
    return prepare_sqlite(stmt, FAST_DIALECT)


def _run(conn: sqlite3.Connection, stmt: Query) -> Any:
    query = _prepare(stmt)
    return conn.execute(query.sql, query.params())


def _index_on(col: Column[Any]) -> str:
    """The name of the records' single-column index on ``col`` (ix_judgments_<column>)."""
    for index in JUDGMENTS.indexes:
        if [c.name for c in index.columns] == [col.name] and index.name:
            return str(index.name)
    raise LookupError(f"no index on judgments.{col.name}")


def _by_index(conn: sqlite3.Connection, stmt: Query, col: Column[Any]) -> Query:
    """``stmt`` made to scan the index on ``col`` when this store has it (older ones may not)."""
    name = _index_on(col)
    m = _SQLITE_MASTER.c
    present = _run(
        conn,
        select(m.name).where(m.type == "index", m.tbl_name == JUDGMENTS.name, m.name == name),
    ).fetchone()
    return stmt.with_hint(JUDGMENTS, f"INDEXED BY {name}", "sqlite") if present else stmt


def _rowid_lists(path: str, col: Column[Any]) -> tuple[list[Any], list[np.ndarray]]:
    """Distinct values of an indexed column and the rowids holding each (an index-only scan)."""
    conn = readonly_sqlite(path)
    try:
        q = select(col, func.group_concat(JUDGMENT_ROWID)).select_from(JUDGMENTS).group_by(col)
        rows = _run(conn, _by_index(conn, q, col)).fetchall()
    finally:
        conn.close()
    values, ids = [], []
    with warnings.catch_warnings():
        # np.fromstring's text mode is the fast parser
        warnings.simplefilter("ignore", DeprecationWarning)
        for value, text in rows:
            values.append(value)
            ids.append(np.fromstring(text, dtype=np.int64, sep=","))
    return values, ids


def _conversation_rowids(path: str) -> tuple[list[Any], list[np.ndarray]]:
    """Rowids of each conversation's judgments: ranges when contiguous (the usual case: a judge
    writes one conversation at a time), explicit lists only for the interleaved ones."""
    conn = readonly_sqlite(path)
    try:
        span = select(
            J.conversation_id,
            func.min(JUDGMENT_ROWID),
            func.max(JUDGMENT_ROWID),
            func.count(),
        ).group_by(J.conversation_id)
        rows = _run(conn, _by_index(conn, span, J.conversation_id)).fetchall()
        values: list[Any] = []
        ids: list[np.ndarray] = []
        scattered = []
        for cid, lo, hi, n in rows:
            values.append(cid)
            if hi - lo + 1 == n:
                ids.append(np.arange(lo, hi + 1, dtype=np.int64))
            else:  # filled below
                ids.append(np.empty(0, np.int64))
                scattered.append(len(values) - 1)
        if scattered:
            one = select(JUDGMENT_ROWID).where(J.conversation_id == bindparam("cid"))
            query = _prepare(_by_index(conn, one, J.conversation_id))
            for i in scattered:
                got = conn.execute(query.sql, query.params(cid=values[i])).fetchall()
                ids[i] = np.fromiter((r[0] for r in got), dtype=np.int64, count=len(got))
        return values, ids
    finally:
        conn.close()


def _verdict_scan(
    path: str, lo: int, hi: int, chunk_rows: int, *, versions: bool = False, turns: bool = False
) -> list[tuple[np.ndarray, np.ndarray, list[str], np.ndarray | None]]:
    """Per chunk of rowids: verdict codes (one byte per row), the rating key of each row (rubric
    and judge; with ``versions`` also the rubric hash and prompt version) and, with ``turns``, the
    turn index of each row (-1: a rating of the whole conversation)."""
    import pandas as pd

    in_chunk = JUDGMENT_ROWID.between(bindparam("start"), bindparam("stop"))
    parts = [J.rubric_id, J.judge, *((J.rubric_hash, J.prompt_version) if versions else ())]
    bounds_cols: list[Any] = []
    for col in parts:
        bounds_cols += [func.min(col), func.max(col)]
    turn_col = [func.group_concat(func.ifnull(J.turn_index, -1), ",")] if turns else []
    codes_q = _prepare(
        select(func.group_concat(VERDICT_CODE, ""), *bounds_cols, *turn_col).where(in_chunk)
    )
    joined_key = parts[0]
    for col in parts[1:]:
        joined_key = joined_key + RJ_SEP + col
    pairs_q = _prepare(select(func.group_concat(joined_key, ROW_SEP)).where(in_chunk))
    conn = readonly_sqlite(path)
    out = []
    try:
        for start in range(lo, hi + 1, chunk_rows):
            bounds = {"start": start, "stop": min(start + chunk_rows - 1, hi)}
            got = conn.execute(codes_q.sql, codes_q.params(**bounds)).fetchone()
            text = got[0]
            if text is None:
                continue
            codes = np.frombuffer(text.encode("ascii"), np.uint8)
            mins, maxs = got[1 : 1 + 2 * len(parts) : 2], got[2 : 2 + 2 * len(parts) : 2]
            tix = None
            if turns:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)  # the fast text parser
                    tix = np.fromstring(got[-1], dtype=np.int32, sep=",")
            if mins == maxs:  # the usual case: one rubric and judge per stretch of rows
                key = RJ_SEP.join(str(v) for v in mins)
                out.append((codes, np.zeros(len(codes), np.int32), [key], tix))
            else:
                joined = conn.execute(pairs_q.sql, pairs_q.params(**bounds)).fetchone()[0]
                rj_codes, rj_vals = pd.factorize(np.array(joined.split(ROW_SEP), dtype=object))
                out.append((codes, rj_codes.astype(np.int32), [str(v) for v in rj_vals], tix))
    finally:
        conn.close()
    return out


def risk_areas(path: str, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], Any]:
    """Risk area of each (rubric, criterion), through the criterion index (one row each)."""
    query = _prepare(
        select(J.risk_area)
        .where(
            J.criterion_id == bindparam("criterion"),
            J.rubric_id == bindparam("rubric"),
            J.risk_area.is_not(None),
        )
        .limit(1)
    )
    conn = readonly_sqlite(path)
    try:
        out = {}
        for rubric, crit in pairs:
            got = conn.execute(query.sql, query.params(criterion=crit, rubric=rubric)).fetchone()
            out[(rubric, crit)] = got[0] if got else None
        return out
    finally:
        conn.close()


@dataclass
class JudgmentCodes:
    """Every judgment row of a SQLite store as integer codes, in rowid order (the order written):
    ``conversation[i]`` indexes ``conversation_ids``, ``criterion[i]`` ``criterion_ids``,
    ``key[i]`` ``keys`` (rubric_id, judge[, rubric_hash, prompt_version]), ``verdict[i]`` is one
    byte (see ``VERDICT_CODE``) and ``turn_index[i]`` the judged turn (-1: the whole
    conversation; None unless asked for). ``risk_area`` maps (rubric, criterion) to its area."""

    conversation_ids: list[Any]
    conversation: np.ndarray
    criterion_ids: list[Any]
    criterion: np.ndarray
    keys: list[tuple[str, ...]]
    key: np.ndarray
    verdict: np.ndarray
    turn_index: np.ndarray | None
    risk_area: dict[tuple[str, str], Any]

    def __len__(self) -> int:
        return len(self.verdict)


def sqlite_judgment_codes(
    path: str,
    progress: Callable[[int, int], Any] | None = None,
    *,
    chunk_rows: int = CHUNK_ROWS,
    versions: bool = False,
    turns: bool = False,
) -> JudgmentCodes:
    """Every judgment row as codes (no Python object per row): three index and table scans in
    parallel threads. ``versions``: the keys carry the rubric hash and prompt version too;
    ``turns``: read each row's turn index."""
    conn = readonly_sqlite(path)
    try:
        lo, hi = _run(
            conn, select(func.min(JUDGMENT_ROWID), func.max(JUDGMENT_ROWID)).select_from(JUDGMENTS)
        ).fetchone()
    finally:
        conn.close()
    if lo is None:
        empty = np.zeros(0, np.int32)
        return JudgmentCodes(
            [], empty, [], empty, [], empty, np.zeros(0, np.uint8), empty if turns else None, {}
        )
    mid = (lo + hi) // 2
    opts = {"versions": versions, "turns": turns}
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        f_conv = pool.submit(_conversation_rowids, path)
        f_crit = pool.submit(_rowid_lists, path, J.criterion_id)
        f_v1 = pool.submit(_verdict_scan, path, lo, mid, chunk_rows, **opts)
        f_v2 = pool.submit(_verdict_scan, path, mid + 1, hi, chunk_rows, **opts)
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
    verd = np.concatenate([c[0] for c in chunks]) if chunks else np.zeros(0, np.uint8)
    key_index: dict[str, int] = {}
    key_parts = []
    for _, local, names, _ in chunks:
        lut = np.array([key_index.setdefault(n, len(key_index)) for n in names], dtype=np.int32)
        key_parts.append(lut[local])
    key = np.concatenate(key_parts) if key_parts else np.zeros(0, np.int32)
    tix = None
    if turns:
        tix = np.concatenate([c[3] for c in chunks]) if chunks else np.zeros(0, np.int32)
    if int(present.sum()) != len(verd) or not (crit_at[present] >= 0).all():
        raise UserError(
            "the store's judgments changed while they were read (a judge is writing); run again"
        )
    keys = [tuple(str(k).split(RJ_SEP)) for k in key_index]
    crit = crit_at[present]
    pairs = sorted({(keys[k][0], str(crit_vals[c])) for k, c in _distinct(key, crit)})
    return JudgmentCodes(
        conversation_ids=conv_vals,
        conversation=conv_at[present],
        criterion_ids=crit_vals,
        criterion=crit,
        keys=keys,
        key=key,
        verdict=verd,
        turn_index=tix,
        risk_area=risk_areas(path, pairs),
    )


def _distinct(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    """The distinct (a, b) pairs of two small-valued code arrays."""
    if len(a) == 0:
        return []
    width = int(b.max()) + 1
    both = np.unique(a.astype(np.int64) * width + b)
    return [(int(x // width), int(x % width)) for x in both]


def _lookup(codes: bytes) -> np.ndarray:
    table = np.zeros(256, dtype=bool)
    table[np.frombuffer(codes, np.uint8)] = True
    return table


_RATED, _SCORED = _lookup(RATED_CODES.tobytes()), _lookup(bytes(SCORE_OF_CODE))
_SCORE = np.full(256, np.nan)
for _code, _score in SCORE_OF_CODE.items():
    _SCORE[_code] = _score


def verdict_masks(verdict: np.ndarray) -> dict[str, np.ndarray]:
    """The count columns' masks and scores of verdict codes: rated, fail, partial, error, other,
    scored and score (NaN where not scored). Table lookups: one pass over the codes each."""
    return {
        "rated": _RATED[verdict],
        "fail": verdict == ord("f"),
        "partial": verdict == ord("q"),
        "error": verdict == ord("e"),
        "other": verdict == ord("o"),
        "scored": _SCORED[verdict],
        "score": _SCORE[verdict],
    }


def sqlite_criterion_counts(
    path: str,
    progress: Callable[[int, int], Any] | None = None,
    *,
    chunk_rows: int = CHUNK_ROWS,
) -> pd.DataFrame:
    """Conversation x (rubric, criterion, judge) counts of every judgment in a SQLite store:
    conversation_id, rubric_id, criterion_id, risk_area, judge, n_rated, n_fail, n_partial,
    n_error, n_other, score_sum, n_scored. Pass/partial/fail scores are the scale's.
    ``progress(done, total)`` is called once the rows are read."""
    import pandas as pd

    codes = sqlite_judgment_codes(path, progress, chunk_rows=chunk_rows)
    if not len(codes):
        return pd.DataFrame(columns=[*COUNT_KEYS, *COUNT_COLUMNS])
    conv = codes.conversation.astype(np.int64)
    crit = codes.criterion.astype(np.int64)
    rj = codes.key.astype(np.int64)
    m = verdict_masks(codes.verdict)
    n_k, n_rj = len(codes.criterion_ids), len(codes.keys)
    key = (conv * n_rj + rj) * n_k + crit
    uniq, inv = np.unique(key, return_inverse=True)

    def count(mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        w = mask.astype(np.float64) if weights is None else np.where(mask, weights, 0.0)
        return np.bincount(inv, weights=w, minlength=len(uniq))

    k_crit = uniq % n_k
    k_rj = (uniq // n_k) % n_rj
    k_conv = uniq // (n_k * n_rj)
    rub_v = np.array([k[0] for k in codes.keys], dtype=object)[k_rj]
    judge_v = np.array([k[1] for k in codes.keys], dtype=object)[k_rj]
    crit_v = np.array(codes.criterion_ids, dtype=object)[k_crit]
    risk = codes.risk_area
    return pd.DataFrame(
        {
            "conversation_id": np.array(codes.conversation_ids, dtype=object)[k_conv],
            "rubric_id": rub_v,
            "criterion_id": crit_v,
            "risk_area": [risk.get((r, c)) for r, c in zip(rub_v, crit_v)],
            "judge": judge_v,
            "n_rated": count(m["rated"]).astype(np.int64),
            "n_fail": count(m["fail"]).astype(np.int64),
            "n_partial": count(m["partial"]).astype(np.int64),
            "n_error": count(m["error"]).astype(np.int64),
            "n_other": count(m["other"]).astype(np.int64),
            "score_sum": count(m["scored"], np.nan_to_num(m["score"])),
            "n_scored": count(m["scored"]).astype(np.int64),
        }
    )
