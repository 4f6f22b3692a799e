"""Shared test setup. Offline by design: set before anything imports transformers or litellm."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist the workers share the cores: torch gets its share of them, not all of them
# (branchpoint.gateway.providers.hf.cpu_threads). Two workers on two cores, each model at 2 threads: OpenMP's
# threads spin on a busy core and the embedded tests took 276 s instead of 44 s at load 5.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault(
        "BRANCHPOINT_TORCH_THREADS",
        str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))),
    )

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

POSTGRES_ENV = "BRANCHPOINT_TEST_POSTGRES"
NO_POSTGRES = f"no PostgreSQL server: run `.ci/with-postgres make test` (sets ${POSTGRES_ENV})"


# tryfirst: xdist's worker reads the xdist_group marks in its own pytest_collection_modifyitems,
# registered after this conftest and so called before it; marks added later never reached it.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks that follow from what a test uses, so that no test file has to repeat them.

    - A test of the embedded model (the ``embedded_provider`` fixture) is ``slow``: it runs a
      real model on the CPU. Under pytest-xdist they all go to one worker (group ``embedded``),
      which loads the model once for the whole run.
    - A test that uses a module-scoped fixture (a store of generated results, a Ray cluster, a
      loaded library) goes to the same worker as the rest of its module, so that the fixture is
      built once a run, not once a worker (``make test`` runs ``--dist loadgroup``).
    """
    # Without a PostgreSQL server (and outside CI) a test of postgres_url is skipped before its
    # set-up: its module-scoped fixtures (a Ray cluster, 4-5 s) were started for nothing.
    no_postgres = (
        None
        if os.environ.get(POSTGRES_ENV) or os.environ.get("CI")
        else pytest.mark.skip(NO_POSTGRES)
    )
    for item in items:
        if no_postgres and "postgres_url" in getattr(item, "fixturenames", ()):
            item.add_marker(no_postgres)
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs if info is not None else {}
        if "embedded_provider" in defs:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group("embedded"))
        elif any(d.scope == "module" for ds in defs.values() for d in ds):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    # Slow single tests first: xdist hands out groups by size (--loadscope-reorder), then single
    # tests in this order, so a 20 s test handed out last no longer leaves the other worker idle
    # at the end. Grouped tests stay with their module (its module fixture is built once).
    items.sort(
        key=lambda item: (
            not (item.get_closest_marker("slow") and not item.get_closest_marker("xdist_group"))
        )
    )


@contextmanager
def _postgres_database() -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database, dropped on leaving (or the test is skipped)."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    base = os.environ.get(POSTGRES_ENV)
    if not base:
        if os.environ.get("CI"):
            pytest.fail(
                f"CI runs the store tests on PostgreSQL too, but ${POSTGRES_ENV} is not set (see .ci/run)"
            )
        pytest.skip(NO_POSTGRES)
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database, dropped afterwards.

    The server comes from ``$BRANCHPOINT_TEST_POSTGRES`` (``.ci/with-postgres make test`` starts one;
    CI always does). Without it the test is skipped, except under CI, where that is a failure.
    """
    with _postgres_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A fresh store: a SQLite file in a temporary directory, and again a PostgreSQL database."""
    from branchpoint.core.store import open_store

    where = (
        request.getfixturevalue("postgres_url")
        if request.param == "postgres"
        else tmp_path / "t.db"
    )
    s = open_store(where)
    yield s
    s.close()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def module_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """``store``, made once for the tests of a module that read what one costly run wrote (a
    test that changes it undoes its change). Its module's tests run on one worker (see above)."""
    from branchpoint.core.store import open_store

    with ExitStack() as stack:
        if request.param == "postgres":
            where: Any = stack.enter_context(_postgres_database())
        else:
            where = tmp_path_factory.mktemp("module_store") / "t.db"
        s = open_store(where)
        stack.callback(s.close)
        yield s


@pytest.fixture(params=["sqlite", "postgres"])
def cli_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """What a command line's ``--db`` gets: a SQLite file's path, and again a PostgreSQL URL."""
    return (
        request.getfixturevalue("postgres_url")
        if request.param == "postgres"
        else str(tmp_path / "cli.db")
    )


@pytest.fixture(scope="session")
def loopback_server() -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of an OpenAI-compatible server backed by ``scripted:echo``.

    It runs in a thread of the test process. Its ``/v1/chat/completions`` honours the test-only
    headers ``x-test-fail-first``/``x-test-key`` (see ``branchpoint.gateway.testing.openai_server``) so that tests can
    ask for 429s without restarting it.
    """
    from branchpoint.gateway.testing.openai_server import ServerThread

    server = ServerThread(model="scripted:echo", retry_after=0.3, reasoning="thinking it over")
    server.start()
    try:
        yield server.base_url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def embedded_provider() -> Any:
    """The embedded SmolLM2 GGUF provider, loaded once per session (about 1.2 GB in float32)."""
    from branchpoint.gateway.providers.embedded import embedded_provider as make

    provider = make()
    provider.load()
    return provider


@pytest.fixture
def sweep_plugin(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The sweep tests' scripted models (tests/fixtures/sweep/sweep_plugin.py), loaded through
    $BRANCHPOINT_PLUGINS as a user's own models are; the module, for its replies."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fixtures" / "sweep"))
    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "sweep_plugin")
    import sweep_plugin

    return sweep_plugin
