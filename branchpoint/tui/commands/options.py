"""Options that several commands take, defined once so that their flags and help agree."""

from __future__ import annotations

from typing import Annotated

import typer

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="PATH|URL",
        help="Store: a SQLite path or a database URL (default $BRANCHPOINT_DB or ./branchpoint.db).",
    ),
]
