"""Sweeps at study scale: one manifest file, its plan (cells, calls, tokens, dollars), its run.

    from simulator.sweep import load_manifest, plan_sweep
    plan = plan_sweep(load_manifest("study.yaml"), "study.yaml")

Names are imported lazily, like ``simulator``'s.
"""

from __future__ import annotations

from core.lazy import lazy_getattr

_EXPORTS = {
    "Manifest": "simulator.sweep.manifest",
    "ManifestError": "simulator.sweep.manifest",
    "load_manifest": "simulator.sweep.manifest",
    "manifest_json_schema": "simulator.sweep.schema",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
