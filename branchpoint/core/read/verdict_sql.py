"""The SQL of the verdict codes and the SQLite compiler of the fast path, without numpy.

Apart from ``branchpoint.core.read.fast`` (which counts with numpy) because the judgment summaries' triggers
are written with the same verdict codes when a store is opened, and opening a store (the TUI's
first screen) should not import numpy.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, func, not_, or_
from sqlalchemy.dialects.sqlite.base import SQLiteCompiler, SQLiteDialect

from branchpoint.core.scales import ERROR, PASS_PARTIAL_FAIL

FAIL, PARTIAL, PASS = PASS_PARTIAL_FAIL.levels
RJ_SEP, ROW_SEP = "\x02", "\x01"  # cannot occur in ids


def verdict_code(verdict: Any, applicable: Any) -> Any:
    """One byte per judgment: e error, n no rating (not applicable, or no verdict), f fail,
    q partial, p pass, o another scale's level. Rated: f, q, p, o. (Also written by the
    judgment summaries' triggers, on the trigger's NEW row: ``branchpoint.core.judgment_summaries``.)"""
    return case(
        (verdict == ERROR, "e"),
        (or_(verdict.is_(None), not_(func.ifnull(applicable, 0))), "n"),
        (verdict == FAIL, "f"),
        (verdict == PARTIAL, "q"),
        (verdict == PASS, "p"),
        else_="o",
    )


class FastCompiler(SQLiteCompiler):
    # ``with_hint(table, "INDEXED BY ...")`` is written after the table name.
    def get_from_hint_text(self, table: Any, text: str | None) -> str | None:
        return text

    # The query's own constants are written into it as literals: SQLite compares a column with a
    # literal faster than with a bound value (a quarter of the verdict scan's time). Values given
    # at run time (``bindparam("name")`` without a value) stay ``?``.
    def visit_bindparam(
        self,
        bindparam: Any,
        within_columns_clause: Any = False,
        literal_binds: Any = False,
        skip_bind_expression: Any = False,
        literal_execute: Any = False,
        render_postcompile: Any = False,
        is_upsert_set: Any = False,
        **kw: Any,
    ) -> Any:
        if bindparam.value is not None and not bindparam.expanding:
            return self.render_literal_bindparam(bindparam, **kw)
        return super().visit_bindparam(
            bindparam,
            within_columns_clause=within_columns_clause,
            literal_binds=literal_binds,
            skip_bind_expression=skip_bind_expression,
            literal_execute=literal_execute,
            render_postcompile=render_postcompile,
            is_upsert_set=is_upsert_set,
            **kw,
        )


class FastDialect(SQLiteDialect):
    statement_compiler = FastCompiler


FAST_DIALECT = FastDialect(paramstyle="qmark")
