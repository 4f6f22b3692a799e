"""The transcript as a judge reads it: each message between markers, in order.

One function makes it for the judge's prompt (``branchpoint.judges.llm_judge``) and for the
rebuild of a stored judge call (``branchpoint.core.call_requests``), which stores the transcript
as a reference to the conversation's turns: the two must agree byte for byte. A transcript is
the concatenation of its messages' blocks, so the transcript of turns 0..k is a prefix of that
of turns 0..k+1 (what a provider's prefix cache serves again).
"""

from __future__ import annotations

from collections.abc import Iterable


def fence_safe(text: str) -> str:
    """Model text cannot open or close a message marker."""
    return text.replace("<<<", "< <<")


def message_block(index: int, role: str, content: str) -> str:
    """One message of the transcript, between its markers, ending with a newline."""
    who = "user" if role == "user" else "chatbot"
    return f"<<<MESSAGE {index} | {who}>>>\n{fence_safe(content)}\n<<<END MESSAGE {index}>>>\n"


def marked_transcript(turns: Iterable[tuple[int, str, str]]) -> str:
    """The blocks of (index, role, content) turns, in the order given."""
    return "".join(message_block(i, role, content) for i, role, content in turns)
