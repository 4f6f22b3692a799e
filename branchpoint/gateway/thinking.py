"""Reasoning written into a reply (``<think>...</think>``) taken out of it, for every provider.

Reasoning models served by transformers, llama.cpp or many OpenAI-compatible servers return their
chain of thought inline. Left in the reply it would be judged as if the user had read it, shown to
the persona as part of the chatbot's message, and lost to the reasoning analysis. The gateway
passes every completion through ``split_reasoning``: the reply keeps what the user would see, and
``Completion.reasoning`` gets the thinking (after any reasoning field the provider returned).
"""

from __future__ import annotations

import re

from branchpoint.gateway.completion import Completion

_BLOCK = re.compile(r"<think(?:ing)?>(.*?)</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
_OPEN = re.compile(r"<think(?:ing)?>", re.IGNORECASE)
_CLOSE = re.compile(r"</think(?:ing)?>", re.IGNORECASE)


def split_think(text: str) -> tuple[str, str | None]:
    """(reply, reasoning or None) of a model's raw text.

    Closed blocks anywhere are reasoning. A close with no opening before it (templates that open
    the block in the prompt) makes everything before it reasoning; an opening never closed (the
    answer ran out of tokens while thinking) makes everything after it reasoning.
    """
    parts: list[str] = []
    head = _CLOSE.search(text)
    first_open = _OPEN.search(text)
    if head is not None and (first_open is None or first_open.start() > head.start()):
        parts.append(text[: head.start()])
        text = text[head.end() :]
    parts += [m.group(1) for m in _BLOCK.finditer(text)]
    text = _BLOCK.sub("", text)
    tail = _OPEN.search(text)
    if tail is not None:
        parts.append(text[tail.end() :])
        text = text[: tail.start()]
    thought = "\n\n".join(p.strip() for p in parts if p.strip())
    return text.strip() if parts else text, thought or None


def split_reasoning(completion: Completion) -> Completion:
    """``completion`` with inline thinking moved from ``text`` to ``reasoning``."""
    if "think" not in completion.text.lower():
        return completion
    reply, thought = split_think(completion.text)
    if thought is None and reply == completion.text:
        return completion
    reasoning = "\n\n".join(r for r in (completion.reasoning, thought) if r) or None
    return completion.model_copy(update={"text": reply, "reasoning": reasoning})
