"""A model call's messages, rebuilt from the store: whole (``ModelCall.messages``), or from the
parts a call stores since schema 5 (``ModelCall.prompt``: prompt texts by hash, and ranges of a
conversation's turns)."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from branchpoint.core.prompt_texts import get_text
from branchpoint.core.records import ModelCall, Turn

FLIP = {"user": "assistant", "assistant": "user"}


class UnknownReference(LookupError):
    """A part names a prompt text or turns the store does not hold."""


def call_messages(session: Session, call: ModelCall) -> list[dict[str, Any]]:
    """``[{"role", "content"}, ...]``, exactly as the call sent them."""
    if call.prompt is None:
        return [dict(m) for m in call.messages]
    out: list[dict[str, Any]] = []
    for part in call.prompt:
        if "turns" in part:
            count = int(part["count"])
            turns = session.exec(
                select(Turn.role, Turn.content)
                .where(Turn.conversation_id == part["turns"], col(Turn.index) < count)
                .order_by(col(Turn.index))
            ).all()
            if len(turns) != count:
                raise UnknownReference(
                    f"call {call.id}: {count} turns of {part['turns']} referred to, "
                    f"{len(turns)} stored"
                )
            flip = bool(part.get("flip"))
            out += [{"role": FLIP[r] if flip else r, "content": c} for r, c in turns]
        elif "text" in part:
            text = get_text(session, part["text"])
            if text is None:
                raise UnknownReference(f"call {call.id}: prompt text {part['text']} not stored")
            out.append({"role": part["role"], "content": text})
        else:
            out.append({"role": part["role"], "content": part["content"]})
    return out
