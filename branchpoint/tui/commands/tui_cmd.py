"""``branchpoint tui``: the terminal UI on a store (read-only except for human labels)."""

from __future__ import annotations

import getpass
from typing import Annotated

import typer

from branchpoint.tui.commands.options import DbOption


def _default_annotator() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (some containers): labels still need an annotator
        return "anonymous"


def tui_command(
    db: DbOption = None,
    annotator: Annotated[
        str | None,
        typer.Option("--annotator", metavar="NAME", help="Who labels (default: the login name)."),
    ] = None,
    conversation: Annotated[
        str | None,
        typer.Option("--conversation", metavar="ID", help="Open this transcript first."),
    ] = None,
    live: Annotated[
        str | None,
        typer.Option(
            "--live",
            metavar="RUN",
            help="Open the live view of this run first ('' for the latest running run).",
        ),
    ] = None,
    sample: Annotated[
        int,
        typer.Option("--sample", min=1, help="Items in a labelling sample (L and R keys)."),
    ] = 30,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the labelling samples.")] = 0,
) -> None:
    """Browse runs and conversations, read transcripts with their verdicts and evidence, compare
    matched arms side by side, label turns blind and rate persona realism, watch a run. Press ?
    for every key."""
    from branchpoint.core.errors import UserError
    from branchpoint.core.store import open_store
    from branchpoint.tui.app.app import BranchpointApp

    name = (annotator or _default_annotator()).strip()
    if not name:
        raise UserError("--annotator: empty name (expected who labels, e.g. --annotator alice)")
    store = open_store(db, create=False)
    try:
        app = BranchpointApp(
            store,
            annotator=name,
            conversation=conversation,
            live_run=live,
            sample_size=sample,
            seed=seed,
        )
        app.run()
    finally:
        store.close()
    # Textual prints the traceback of a crash and returns; the exit status must say it failed
    if app.return_code:
        raise typer.Exit(app.return_code)


def register(app: typer.Typer) -> None:
    app.command("tui")(tui_command)
