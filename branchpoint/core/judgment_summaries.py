"""Per conversation x rating key x criterion summaries of the judgments, kept by the store itself.

The analysis of a store with forks needs each rating's verdict and turn index (to count a copied
turn once and to cut a contrast at the fork), which at the seed study's scale is 17 million rows:
reading them is most of the analysis' time. A summary row holds, for one conversation, rubric
(id and hash), judge, prompt version and criterion, one byte per turn index (``codes``: the byte
at position t is the verdict code of the judgment of turn t, a space where there is none) plus
the rating of the whole conversation (``whole``) and the number of judgment rows it stands for
(``n``). 35,000 conversations x 22 criteria x their judges is under a million short rows, read
in about a second.

SQLite triggers on ``judgments`` keep the rows right whoever writes: the judge runner, a resumed
or re-run judging, ``--retry-errors`` (delete, then insert), an overwrite (update) and the tests'
raw ``INSERT`` s. Migration 8 fills them for an older store (``backfill``). A summary row whose
``n`` differs from its number of verdict bytes (two judgments on one turn under one key, which
the judgment ids rule out) makes the reader refuse the summaries, so the analysis falls back to
the per-turn rows instead of counting wrongly.

SQLite only: the per-turn fast path they replace (``branchpoint.core.read.fast``) is SQLite's; PostgreSQL
aggregates with SQL over the judgment table, as before.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import literal_column

from branchpoint.core.read.sqlite_file import readonly_sqlite
from branchpoint.core.read.verdict_sql import FAST_DIALECT, RJ_SEP, verdict_code

if TYPE_CHECKING:
    import numpy as np

TABLE = "judgment_summaries"
KEY_COLUMNS = (
    "conversation_id",
    "rubric_id",
    "rubric_hash",
    "judge",
    "prompt_version",
    "criterion_id",
)
# The order of a rating key's parts in ``branchpoint.core.read.fast.JudgmentCodes.keys``.
RATING_KEY = ("rubric_id", "judge", "rubric_hash", "prompt_version")
EMPTY = ord(" ")
TRIGGERS = (f"{TABLE}_insert", f"{TABLE}_delete", f"{TABLE}_update")

_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    + ", ".join(f"{c} TEXT NOT NULL" for c in KEY_COLUMNS)
    + ", codes TEXT NOT NULL DEFAULT '', whole TEXT NOT NULL DEFAULT ' ', n INTEGER NOT NULL "
    f"DEFAULT 0, PRIMARY KEY ({', '.join(KEY_COLUMNS)})) WITHOUT ROWID"
)


def _code(row: str) -> str:
    """The verdict code (``branchpoint.core.read.verdict_sql.verdict_code``) of the trigger's OLD or NEW row."""
    expr = verdict_code(literal_column(f"{row}.verdict"), literal_column(f"{row}.applicable"))
    return str(expr.compile(dialect=FAST_DIALECT, compile_kwargs={"literal_binds": True}))


def _match(row: str) -> str:
    return " AND ".join(f"{c} = {row}.{c}" for c in KEY_COLUMNS)


def _add(row: str) -> str:
    """Statements that record the judgment ``row`` (NEW) in its summary."""
    t, code = f"{row}.turn_index", _code(row)
    whole = f"{t} IS NULL OR {t} < 0"
    return (
        f"INSERT INTO {TABLE} ({', '.join(KEY_COLUMNS)}) VALUES "
        f"({', '.join(f'{row}.{c}' for c in KEY_COLUMNS)}) ON CONFLICT DO NOTHING; "
        f"UPDATE {TABLE} SET "
        f"codes = CASE WHEN {whole} THEN codes ELSE "
        f"printf('%-*s', {t}, substr(codes, 1, {t})) || ({code}) || substr(codes, {t} + 2) END, "
        f"whole = CASE WHEN {whole} THEN ({code}) ELSE whole END, n = n + 1 "
        f"WHERE {_match(row)};"
    )


def _remove(row: str) -> str:
    """Statements that take the judgment ``row`` (OLD) out of its summary."""
    t = f"{row}.turn_index"
    whole = f"{t} IS NULL OR {t} < 0"
    return (
        f"UPDATE {TABLE} SET "
        f"codes = CASE WHEN {whole} THEN codes ELSE "
        f"substr(codes, 1, {t}) || ' ' || substr(codes, {t} + 2) END, "
        f"whole = CASE WHEN {whole} THEN ' ' ELSE whole END, n = n - 1 WHERE {_match(row)}; "
        f"DELETE FROM {TABLE} WHERE {_match(row)} AND n <= 0;"
    )


_WATCHED = ", ".join(["turn_index", "verdict", "applicable", *KEY_COLUMNS])
_TRIGGER_SQL = (
    f"CREATE TRIGGER IF NOT EXISTS {TRIGGERS[0]} AFTER INSERT ON judgments BEGIN {_add('NEW')} END",
    f"CREATE TRIGGER IF NOT EXISTS {TRIGGERS[1]} AFTER DELETE ON judgments BEGIN {_remove('OLD')} END",
    f"CREATE TRIGGER IF NOT EXISTS {TRIGGERS[2]} AFTER UPDATE OF {_WATCHED} ON judgments "
    f"BEGIN {_remove('OLD')} {_add('NEW')} END",
)


def install(conn: Any) -> None:
    """Create the table and its triggers (idempotent). ``conn``: a DB-API connection or anything
    with ``exec_driver_sql`` (a SQLAlchemy connection)."""
    run = getattr(conn, "exec_driver_sql", None) or conn.execute
    run(_CREATE)
    for sql in _TRIGGER_SQL:
        run(sql)


def ensure(conn: Any, path: str) -> None:
    """Summaries kept from now on: nothing to do where the table and its triggers are there (a
    read, so opening a store takes no write lock); else filled from the rows and kept (a new
    store, or one whose triggers were dropped for a bulk load that did not finish)."""
    if not maintained(conn):
        backfill(conn, path)


def drop_triggers(conn: sqlite3.Connection) -> None:
    """Stop maintaining the summaries (a bulk load that ``backfill`` follows)."""
    for name in TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")


def summary_rows(path: str) -> list[tuple[Any, ...]]:
    """The summary rows of every judgment of a SQLite store, from the rows themselves (what the
    triggers would have written): (conversation_id, rubric_id, rubric_hash, judge,
    prompt_version, criterion_id, codes, whole, n)."""
    import numpy as np

    from branchpoint.core.read.fast import sqlite_judgment_codes

    codes = sqlite_judgment_codes(path, versions=True, turns=True)
    if not len(codes):
        return []
    assert codes.turn_index is not None
    n_key, n_crit = len(codes.keys), len(codes.criterion_ids)
    dense = (codes.conversation.astype(np.int64) * n_key + codes.key) * n_crit + codes.criterion
    groups, inv = np.unique(dense, return_inverse=True)
    turn = codes.turn_index.astype(np.int64)
    own = turn >= 0
    width = int(turn.max()) + 1 if own.any() else 0
    cells = np.full((len(groups), width), EMPTY, np.uint8)
    cells[inv[own], turn[own]] = codes.verdict[own]
    whole = np.full(len(groups), EMPTY, np.uint8)
    whole[inv[~own]] = codes.verdict[~own]
    n = np.bincount(inv, minlength=len(groups))
    crit = groups % n_crit
    key = (groups // n_crit) % n_key
    conv = groups // (n_crit * n_key)
    out = []
    for g in range(len(groups)):
        rubric, judge, rubric_hash, version = codes.keys[key[g]]
        out.append(
            (
                str(codes.conversation_ids[conv[g]]), rubric, rubric_hash, judge, version,
                str(codes.criterion_ids[crit[g]]), cells[g].tobytes().decode("ascii").rstrip(" "),
                chr(whole[g]), int(n[g]),
            )
        )  # fmt: skip
    return out


def backfill(conn: Any, path: str) -> int:
    """Fill the summaries of a store's existing judgments (migration 8, or after a bulk load
    with the triggers off); returns the rows written. ``conn`` writes, ``path`` is read."""
    run = getattr(conn, "exec_driver_sql", None) or conn.execute
    install(conn)
    run(f"DELETE FROM {TABLE}")
    # a new store has no judgments: nothing to read (and numpy not to import, for the TUI)
    rows = summary_rows(path) if run("SELECT 1 FROM judgments LIMIT 1").fetchone() else []
    place = ", ".join("?" * (len(KEY_COLUMNS) + 3))
    sql = f"INSERT INTO {TABLE} ({', '.join(KEY_COLUMNS)}, codes, whole, n) VALUES ({place})"
    if hasattr(conn, "exec_driver_sql"):
        conn.exec_driver_sql(sql, rows) if rows else None
    else:
        conn.executemany(sql, rows)
    return len(rows)


@dataclass
class JudgmentSummaries:
    """The summaries of a SQLite store as codes, one entry per summary row (a group):
    ``conversation[g]`` indexes ``conversation_ids``, ``key[g]`` ``keys`` (rubric_id, judge,
    rubric_hash, prompt_version, as ``branchpoint.core.read.fast.JudgmentCodes``), ``criterion[g]``
    ``criterion_ids``; ``cells[g, t]`` the verdict code of turn t (``EMPTY``: none), the last
    column the whole conversation's; ``n[g]`` the judgment rows it stands for."""

    conversation_ids: list[str]
    conversation: np.ndarray
    keys: list[tuple[str, ...]]
    key: np.ndarray
    criterion_ids: list[str]
    criterion: np.ndarray
    cells: np.ndarray
    n: np.ndarray

    def __len__(self) -> int:
        return len(self.n)

    @property
    def consistent(self) -> bool:
        """Every row holds as many verdicts as judgments (see the module's docstring)."""
        return bool(((self.cells != EMPTY).sum(axis=1) == self.n).all())


def maintained(conn: Any) -> bool:
    """The store has the summaries and the triggers that keep them."""
    run = getattr(conn, "exec_driver_sql", None) or conn.execute
    got = run("SELECT name FROM sqlite_master WHERE name IN (?, ?, ?, ?)", (TABLE, *TRIGGERS))
    return {r[0] for r in got.fetchall()} == {TABLE, *TRIGGERS}


def read_summaries(path: str) -> JudgmentSummaries | None:
    """The summaries of a SQLite store, or None where it has none (a store opened read-only
    before migration 8 upgraded it) or they disagree with their counts (``consistent``)."""
    import numpy as np
    import pandas as pd

    conn = readonly_sqlite(path)
    try:
        conn.execute("BEGIN")  # one snapshot for both queries
        if not maintained(conn):
            return None
        # Pages read through a memory map: the summaries lie scattered in a store of several
        # GB, and copying each page through SQLite's cache made the read 1.6x slower.
        conn.execute("PRAGMA mmap_size=2147418112")
        shortest, width = conn.execute(
            f"SELECT min(length(codes)), max(length(codes)) FROM {TABLE}"
        ).fetchone()
        if width is None:
            return None  # nothing judged
        rk = f" || '{RJ_SEP}' || ".join(RATING_KEY)
        # Each row's codes padded to the longest (no padding needed where all are as long).
        padded = "codes" if shortest == width else f"printf('%-*s', {int(width)}, codes)"
        rows = conn.execute(
            f"SELECT conversation_id, {rk}, group_concat(criterion_id, '\x01'), "
            f"group_concat({padded} || whole, ''), "
            f"group_concat(n) FROM {TABLE} GROUP BY {', '.join(KEY_COLUMNS[:-1])}"
        ).fetchall()
    finally:
        conn.close()
    conv_codes, conv_ids = pd.factorize(np.array([r[0] for r in rows], dtype=object))
    key_codes, key_names = pd.factorize(np.array([r[1] for r in rows], dtype=object))
    crit_index: dict[str, int] = {}
    lists: dict[str, np.ndarray] = {}
    per_row = []
    for r in rows:
        got = lists.get(r[2])
        if got is None:
            got = np.array(
                [crit_index.setdefault(c, len(crit_index)) for c in r[2].split("\x01")], np.int32
            )
            lists[r[2]] = got
        per_row.append(got)
    sizes = np.array([len(c) for c in per_row], dtype=np.int64)
    cells = np.frombuffer("".join(r[3] for r in rows).encode("ascii"), np.uint8)
    cells = cells.reshape(-1, int(width) + 1)
    n = np.array(",".join(r[4] for r in rows).split(","), dtype=np.int64)
    out = JudgmentSummaries(
        conversation_ids=[str(c) for c in conv_ids],
        conversation=np.repeat(conv_codes.astype(np.int32), sizes),
        keys=[tuple(str(k).split(RJ_SEP)) for k in key_names],
        key=np.repeat(key_codes.astype(np.int32), sizes),
        criterion_ids=list(crit_index),
        criterion=np.concatenate(per_row) if per_row else np.zeros(0, np.int32),
        cells=cells,
        n=n,
    )
    return out if out.consistent else None
