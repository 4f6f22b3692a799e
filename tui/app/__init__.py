"""The Textual app (``branchpoint tui``) and the one rule for showing model text in it.

from tui.app import BranchpointApp
BranchpointApp(open_store("results.db"), annotator="alice").run()
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "BranchpointApp": "tui.app.app",
    "untrusted": "tui.app.safe_text",
    "one_line": "tui.app.safe_text",
    "clean": "tui.app.safe_text",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tui.app' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from tui.app.app import BranchpointApp
    from tui.app.safe_text import clean, one_line, untrusted
