"""Counts in sentences: "1 conversation", "2 conversations". One rule, so that no output says
"1 conversations" (the demo's report did)."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun in the number it takes (``plural``: where adding "s" is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
