"""How an arm's variant choices are written on one line (``disclosure=open help=decline``)."""

from __future__ import annotations

from collections.abc import Mapping


def choices_summary(choices: Mapping[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(choices.items()))
