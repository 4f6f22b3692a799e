"""Sweeps at study scale: one manifest file, its plan (cells, calls, tokens, dollars), its run.

    from simulator.sweep import load_manifest, plan_sweep
    plan = plan_sweep(load_manifest("study.yaml"), "study.yaml")

Names are imported lazily, like ``simulator``'s.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Manifest": "simulator.sweep.manifest",
    "ManifestError": "simulator.sweep.manifest",
    "load_manifest": "simulator.sweep.manifest",
    "manifest_json_schema": "simulator.sweep.schema",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator.sweep' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
