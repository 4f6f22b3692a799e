"""The study layer, above the judges and beside the analysis: sweeps at study scale from one
manifest file, its plan (cells, calls, tokens, dollars, power), its run with live and final judging.

    from study import load_manifest, plan_sweep
    plan = plan_sweep(load_manifest("study.yaml"), "study.yaml")

Names are imported lazily, like every package's.
"""

from __future__ import annotations

from core.lazy import lazy_getattr

_EXPORTS = {
    "Manifest": "study.manifest",
    "ManifestError": "study.manifest",
    "load_manifest": "study.manifest",
    "manifest_json_schema": "study.schema",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
