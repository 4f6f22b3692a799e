"""The suite's own set-up (tests/conftest.py): under ``--dist loadgroup`` (``make test``) a test
that uses a module-scoped fixture carries its module's xdist group, so the fixture is built once a
run; and the workers' torch threads share the cores out."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def built_once() -> int:
    return os.getpid()


def test_a_module_scoped_fixture_keeps_its_module_on_one_worker(
    built_once: int, request: pytest.FixtureRequest
) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("only under pytest-xdist --dist loadgroup (make test)")
    # xdist sends tests by the group it appended to the node id ("path::name@group")
    assert request.node.nodeid.endswith("@tests/test_suite_groups.py"), request.node.nodeid


def test_xdist_workers_get_their_share_of_the_cores_for_torch() -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        pytest.skip("only under pytest-xdist with several workers")
    from branchpoint.gateway.providers.hf import cpu_threads

    assert cpu_threads() == max(1, (os.cpu_count() or 1) // workers)
