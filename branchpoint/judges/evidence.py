"""Checking a judge's evidence quotes against the transcript it saw.

A quote is verified when it occurs in one message exactly, or else after normalising both sides
(Unicode NFKC, case folded, curly quotes and dashes made plain, runs of whitespace collapsed).
A quote with an ellipsis (``...`` or ``[...]``) is verified when its pieces occur in order in one
message. Anything else is kept, flagged ``verified: false``: the judge may have invented it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from branchpoint.judges.verdicts import Evidence, TranscriptTurn

_PLAIN = str.maketrans(
    {"‘": "'", "’": "'", "ʼ": "'", "“": '"', "”": '"', "–": "-", "—": "-", "…": "..."}
)
_ELLIPSIS = re.compile(r"\s*(?:\[\s*(?:\.\.\.|…)\s*\]|\.\.\.|…)\s*")
_EDGE = " \t\r\n\"'“”‘’`"


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_PLAIN).casefold()
    return " ".join(text.split())


def _pieces_in_order(haystack: str, pieces: list[str]) -> bool:
    start = 0
    for piece in pieces:
        found = haystack.find(piece, start)
        if found < 0:
            return False
        start = found + len(piece)
    return True


def verify_quote(quote: str, transcript: Iterable[TranscriptTurn]) -> Evidence:
    turns = list(transcript)
    for t in turns:
        if quote and quote in t.content:
            return Evidence(quote=quote, verified=True, turn_index=t.index, match="exact")
    core = quote.strip(_EDGE)
    pieces = [normalize(p) for p in _ELLIPSIS.split(core) if p.strip(_EDGE + ".")]
    pieces = [p.strip(_EDGE) for p in pieces if p.strip(_EDGE)]
    if pieces:
        for t in turns:
            if _pieces_in_order(normalize(t.content), pieces):
                return Evidence(quote=quote, verified=True, turn_index=t.index, match="normalized")
    return Evidence(quote=quote, verified=False)


def verify_quotes(quotes: Iterable[str], transcript: Iterable[TranscriptTurn]) -> list[Evidence]:
    turns = list(transcript)
    return [verify_quote(q, turns) for q in quotes if q and q.strip()]
