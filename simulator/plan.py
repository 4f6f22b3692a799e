"""The plan of a run as plain, picklable data: which conversation trees to grow.

A ``TreeSpec`` is one scenario x target x condition x replicate with its arms; nothing in it
holds a connection, a model or a lock, so a plan can be shipped to another process.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scenarios.models import Scenario
    from simulator.completion import GenParams


def conversation_id(
    run_id: str, variant_id: str, target: str, condition: str, replicate: int
) -> str:
    """Deterministic, so that a re-run of the same run finds its conversations."""
    key = "\x1f".join([run_id, variant_id, target, condition, str(replicate)])
    return "c" + hashlib.sha256(key.encode()).hexdigest()[:15]


@dataclass
class Arm:
    """One variant's conversation in a tree."""

    variant: Any  # scenarios.variants.Variant
    variant_id: str
    choices: dict[str, Any]  # branch point -> option
    conversation_id: str
    order: int  # position in the scenario's variant list; the lowest leads a group

    def __repr__(self) -> str:
        return f"Arm({self.variant_id}, {self.conversation_id})"


@dataclass
class TreeSpec:
    """One scenario x target x condition x replicate."""

    scenario: Scenario
    scenario_hash: str
    scenario_path: str | None
    arms: list[Arm]
    target: str
    target_params: GenParams
    condition: str
    system_prompt: str | None
    replicate: int
    seed: int
    fork: str  # shared | independent
    max_turns: int
