"""How a call's messages are stored: what is new in them, and references to what is stored.

A caller that knows its messages end with a conversation's stored turns (the persona and the
chatbot, in the engine) passes the gateway a layout: the messages before them, then a
``TurnsRef``. The gateway stores the leading messages by hash (``branchpoint.core.records.PromptText``: a
system prompt costs its bytes once per store) and the turns as one reference, so a call costs
the same few bytes at exchange 20 as at exchange 1. ``branchpoint.core.call_requests.call_messages``
rebuilds the messages.

A judge's call (``branchpoint.judges.llm_judge``) lays out one message as pieces
(``ComposedMessage``): texts, stored by hash where long (the scenario's context, the criteria
asked for), and the conversation's transcript as a reference to its stored turns
(``TranscriptRef``, rendered by ``branchpoint.core.judge_transcript``), so a judge call stores a
few hundred bytes however long its prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

from branchpoint.gateway.completion import Message, Role

SHORT = 160  # a message at most this long is stored as is: a hash would cost about as much


@dataclass(frozen=True)
class TurnsRef:
    """The turns 0..count-1 of ``conversation_id``, in order; roles swapped when ``flip``."""

    conversation_id: str
    count: int
    flip: bool = False


@dataclass(frozen=True)
class TranscriptRef:
    """The judge's marked transcript of the turns 0..count-1 of ``conversation_id``."""

    conversation_id: str
    count: int


@dataclass(frozen=True)
class ComposedMessage:
    """One message whose content is its pieces joined: texts, and transcripts of stored turns."""

    role: Role
    pieces: tuple[str | TranscriptRef, ...]


@dataclass(frozen=True)
class CallLayout:
    """``lead`` messages, then the referenced turns: together the call's whole message list."""

    lead: tuple[Message | ComposedMessage, ...]
    turns: TurnsRef | None = None

    def size(self) -> int:
        return len(self.lead) + (self.turns.count if self.turns else 0)
