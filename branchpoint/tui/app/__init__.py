"""The Textual app (``branchpoint tui``) and the one rule for showing model text in it.

from branchpoint.tui.app import BranchpointApp
BranchpointApp(open_store("results.db"), annotator="alice").run()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    "BranchpointApp": "branchpoint.tui.app.app",
    "untrusted": "branchpoint.tui.app.safe_text",
    "one_line": "branchpoint.tui.app.safe_text",
    "clean": "branchpoint.tui.app.safe_text",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:
    from branchpoint.tui.app.app import BranchpointApp
    from branchpoint.tui.app.safe_text import clean, one_line, untrusted
