"""An analysis' matrix products run on one BLAS thread (``branchpoint.analysis.stats.threads``):
OpenBLAS's idle workers spin, CPU spent for nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from branchpoint.analysis import pipeline
from branchpoint.analysis.stats.threads import one_blas_thread
from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store


def _blas_threads() -> set[int]:
    return {int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"}


def test_one_blas_thread_inside_and_the_setting_restored_after() -> None:
    with threadpool_limits(limits=2, user_api="blas"):
        if _blas_threads() != {2}:
            pytest.skip("this BLAS cannot run two threads")
        with one_blas_thread():
            assert _blas_threads() == {1}
        assert _blas_threads() == {2}


def test_run_analysis_computes_on_one_blas_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    write_teen_store(db, TeenDesign(n_scenarios=3, n_exchanges=2), seed=0)
    seen: list[set[int]] = []
    rates = pipeline.failure_rates

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(_blas_threads())
        return rates(*args, **kwargs)

    monkeypatch.setattr(pipeline, "failure_rates", watched)
    with threadpool_limits(limits=2, user_api="blas"):
        if _blas_threads() != {2}:
            pytest.skip("this BLAS cannot run two threads")
        pipeline.run_analysis(str(db), n_boot=20, examples=0)
        assert _blas_threads() == {2}
    assert seen and all(s == {1} for s in seen)
