"""Errors that reach the user as one line, without a traceback."""

from __future__ import annotations

from collections.abc import Sequence


class UserError(Exception):
    """Bad input or a state the user can fix. The message is the whole story, on one line."""


class StoreError(UserError):
    """A store that cannot be opened or used; the message is one line for the user."""


class FieldProblem(ValueError):
    """Raised by model validators to point the error at one field of the model (a relative loc).
    Here, not in ``branchpoint.core.yamlio`` (which re-exports it): a model that only validates
    (the analysis plan ``analyze`` reads) need not load the YAML library (20 ms)."""

    def __init__(self, field_loc: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.field_loc = tuple(field_loc)
