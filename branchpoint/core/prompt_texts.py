"""Prompt texts stored once by hash (``branchpoint.core.records.PromptText``), and read back."""

from __future__ import annotations

import hashlib

from sqlmodel import Session

from branchpoint.core.records import PromptText


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def put_text(session: Session, kind: str, text: str) -> str:
    """Store ``text`` under its hash unless it is there already; returns the hash.

    The caller commits; a text is immutable, so two writers racing on one hash write the same row."""
    key = text_hash(text)
    if session.get(PromptText, key) is None:
        session.add(PromptText(hash=key, kind=kind, text=text))
    return key


def get_text(session: Session, key: str) -> str | None:
    row = session.get(PromptText, key)
    return row.text if row is not None else None
