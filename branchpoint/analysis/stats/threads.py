"""The analysis' matrix products on one BLAS thread.

The bootstraps multiply a replicate-weights matrix (replicates x scenarios) by per-scenario sums
(``branchpoint.analysis.stats.bootstrap``): small products, which OpenBLAS still hands to its
worker threads. Those threads then spin waiting for work between products: on a 300-conversation
sweep ``branchpoint analyze`` used 1.13 CPUs for a single-threaded computation, 0.4 s of CPU of
its 3.3 s, with no gain in wall time (and on a shared, loaded machine the spinning threads take
cores from the analysis). The products give the same numbers on one thread (each entry is one dot
product, not split between threads; the analyze JSON is byte for byte the same).

OpenBLAS starts its workers when numpy is loaded, and they spin then too: 0.2 s of CPU while
``analyze`` imports. A command that computes an analysis therefore asks for one thread before
numpy loads (``one_blas_thread_in_process``); ``one_blas_thread`` limits the products of an
analysis run in a process that loaded numpy already (a notebook, the tests).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


def one_blas_thread_in_process() -> None:
    """OpenBLAS started with one thread in this process, unless the user set
    ``OPENBLAS_NUM_THREADS``: for a command that loads numpy next (no effect once it is loaded)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS limited to one thread inside (restored after; see the module docstring); also a
    decorator. Without ``threadpoolctl`` (a dependency of scikit-learn) BLAS keeps its setting."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - installed with scikit-learn
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield
