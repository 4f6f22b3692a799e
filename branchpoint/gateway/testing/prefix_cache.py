"""An imitation of OpenAI's automatic prompt caching, for the loopback server.

OpenAI serves the longest prefix of a prompt that an earlier prompt shared, in blocks of 128
tokens, from 1,024 tokens on, and reports it as ``usage.prompt_tokens_details.cached_tokens``.
Here a prompt's tokens are the loopback server's (the scripted models count whitespace-separated
words, message by message), each tagged with its message's role and position in the message so
that the same words in other messages are other tokens. Every prefix of every prompt answered
is kept (by a running hash at each block boundary) for as long as the server runs: the cache of
a provider under steady load, never evicted. What it reports is what tests compare the prompt
layout against (``benchmarks/judge_cache_share.py``) and what the server bills at the cached rate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

BLOCK = 128
MIN_TOKENS = 1024


def prompt_tokens(messages: Iterable[tuple[str, str]]) -> Iterator[bytes]:
    """The tokens of (role, content) messages: their words (as many as the scripted models
    count), the first of each message marked with its role, so that where a message starts is
    part of the prefix, as a chat template makes it."""
    for role, content in messages:
        first = True
        for word in content.split():
            yield (f"<{role}>" + word).encode() if first else word.encode()
            first = False


class PrefixCache:
    """``serve(tokens)`` says how many of a prompt's tokens the cache had, then keeps them."""

    def __init__(self, block: int = BLOCK, min_tokens: int = MIN_TOKENS) -> None:
        self.block = block
        self.min_tokens = min_tokens
        self._prefixes: set[bytes] = set()

    def serve(self, tokens: Iterable[bytes]) -> tuple[int, int]:
        """(the prompt's token count, the tokens of it served from the cache)."""
        digest = hashlib.blake2b(digest_size=16)
        seen: list[bytes] = []
        n = 0
        for token in tokens:
            n += 1
            digest.update(len(token).to_bytes(4, "little") + token)
            if n >= self.min_tokens and n % self.block == 0:
                seen.append(digest.copy().digest())
        cached_blocks = 0
        for key in seen:
            if key not in self._prefixes:
                break
            cached_blocks += 1
        self._prefixes.update(seen)
        if cached_blocks == 0:
            return n, 0
        return n, self.min_tokens + (cached_blocks - 1) * self.block
