"""A frame's rows for ``--format json``: one helper for every command that writes them."""

from __future__ import annotations

import json
from typing import Any


def json_records(frame: Any) -> list[Any]:
    """The rows of ``frame`` as JSON values (NaN as null, times in ISO); none for no frame."""
    if frame is None or getattr(frame, "empty", True):
        return []
    out: list[Any] = json.loads(frame.to_json(orient="records", date_format="iso"))
    return out
