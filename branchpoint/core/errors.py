"""Errors that reach the user as one line, without a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or a state the user can fix. The message is the whole story, on one line."""


class StoreError(UserError):
    """A store that cannot be opened or used; the message is one line for the user."""
