"""The study layer, above the judges and beside the analysis: sweeps at study scale from one
manifest file, its plan (cells, calls, tokens, dollars, power), its run with live and final judging.

    from study import plan_study, run_study
    plan = plan_study("study.yaml")   # cells, calls, tokens, dollars, wall time, power
    result = run_study(plan)          # the cells not done yet, and the manifest's judges

Names are imported lazily, like every package's.
"""

from __future__ import annotations

from core.lazy import lazy_getattr

_EXPORTS = {
    "StudyPlan": "study.api",
    "StudyResult": "study.api",
    "arun_study": "study.api",
    "plan_study": "study.api",
    "run_study": "study.api",
    "study_monitor": "study.api",
    "Manifest": "study.manifest",
    "ManifestError": "study.manifest",
    "load_manifest": "study.manifest",
    "manifest_json_schema": "study.schema",
    "SweepPlan": "study.plan",
    "SweepResult": "study.run",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
