"""The study layer, above the judges and beside the analysis: sweeps at study scale from one
manifest file, its plan (cells, calls, tokens, dollars, power), its run with live and final judging.

    from branchpoint.study import plan_study, run_study
    plan = plan_study("study.yaml")   # cells, calls, tokens, dollars, wall time, power
    result = run_study(plan)          # the cells not done yet, and the manifest's judges

Names are imported lazily, like every package's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    "StudyPlan": "branchpoint.study.api",
    "StudyResult": "branchpoint.study.api",
    "arun_study": "branchpoint.study.api",
    "plan_study": "branchpoint.study.api",
    "run_study": "branchpoint.study.api",
    "study_monitor": "branchpoint.study.api",
    "Manifest": "branchpoint.study.manifest",
    "ManifestError": "branchpoint.study.manifest",
    "load_manifest": "branchpoint.study.manifest",
    "manifest_json_schema": "branchpoint.study.schema",
    "SweepPlan": "branchpoint.study.plan",
    "SweepResult": "branchpoint.study.run",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors: the names the lazy map serves
    from branchpoint.study.api import (
        StudyPlan,
        StudyResult,
        arun_study,
        plan_study,
        run_study,
        study_monitor,
    )
    from branchpoint.study.manifest import Manifest, ManifestError, load_manifest
    from branchpoint.study.plan import SweepPlan
    from branchpoint.study.run import SweepResult
    from branchpoint.study.schema import manifest_json_schema
