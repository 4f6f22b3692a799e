"""Commands of this group are added by the issue that builds them."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    return None
