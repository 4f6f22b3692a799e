"""Options that several commands take, defined once so that their flags and help agree."""

from __future__ import annotations

from typing import Annotated

import typer

# None: the gateway's default (branchpoint.gateway.limits.DEFAULT_TIMEOUT_S, not imported here:
# ``branchpoint --help`` stays light)
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        min=0.001,
        help="Seconds one attempt of a model call may take before it is given up and retried "
        "(default 120: a hung endpoint holds a conversation minutes, not 40; raise it for "
        "reasoning models that think for minutes). A timed-out attempt may have been billed: "
        "a budget counts it at its bound.",
    ),
]

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="PATH|URL",
        help="Store: a SQLite path or a database URL (default $BRANCHPOINT_DB or ./branchpoint.db).",
    ),
]
