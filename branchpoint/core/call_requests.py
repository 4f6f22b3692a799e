"""A model call's messages, rebuilt from the store: whole (``ModelCall.messages``), or from the
parts a call stores since schema 5 (``ModelCall.prompt``: prompt texts by hash, and ranges of a
conversation's turns), and, since schema 10, a message made of pieces (``{"role", "pieces":
[...]}``: texts as is or by hash, and ``{"transcript": CONVERSATION_ID, "count": N}``, the judge's
marked transcript of turns 0..N-1, ``branchpoint.core.judge_transcript``); and its params, the
output schema restored where it is stored by hash (``json_schema_ref``)."""

from __future__ import annotations

import json
from typing import Any

from sqlmodel import Session, col, select

from branchpoint.core.judge_transcript import marked_transcript
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
            turns = _turns(session, call, part["turns"], int(part["count"]))
            flip = bool(part.get("flip"))
            out += [{"role": FLIP[r] if flip else r, "content": c} for _, r, c in turns]
        elif "pieces" in part:
            content = "".join(_piece(session, call, piece) for piece in part["pieces"])
            out.append({"role": part["role"], "content": content})
        else:
            out.append({"role": part["role"], "content": _text(session, call, part)})
    return out


def call_params(session: Session, call: ModelCall) -> dict[str, Any]:
    """The call's stored params, its output schema (``json_schema``) restored from its hash."""
    params = dict(call.params or {})
    ref = params.pop("json_schema_ref", None)
    if ref is not None:
        params["json_schema"] = json.loads(_text(session, call, ref))
    return params


def _text(session: Session, call: ModelCall, part: dict[str, Any]) -> str:
    if "content" in part:
        return str(part["content"])
    text = get_text(session, part["text"])
    if text is None:
        raise UnknownReference(f"call {call.id}: prompt text {part['text']} not stored")
    return text


def _piece(session: Session, call: ModelCall, piece: dict[str, Any]) -> str:
    if "transcript" in piece:
        return marked_transcript(_turns(session, call, piece["transcript"], int(piece["count"])))
    return _text(session, call, piece)


def _turns(
    session: Session, call: ModelCall, conversation_id: str, count: int
) -> list[tuple[int, str, str]]:
    turns = session.exec(
        select(Turn.index, Turn.role, Turn.content)
        .where(Turn.conversation_id == conversation_id, col(Turn.index) < count)
        .order_by(col(Turn.index))
    ).all()
    if len(turns) != count:
        raise UnknownReference(
            f"call {call.id}: {count} turns of {conversation_id} referred to, {len(turns)} stored"
        )
    return [(int(i), str(r), str(c or "")) for i, r, c in turns]
