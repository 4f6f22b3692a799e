"""Shared test setup. Offline by design: set before anything imports transformers or litellm."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Any]:
    """A fresh SQLite store in a temporary directory."""
    from simulator.store import open_store

    s = open_store(tmp_path / "t.db")
    yield s
    s.close()


@pytest.fixture(scope="session")
def loopback_server() -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of an OpenAI-compatible server backed by ``scripted:echo``.

    It runs in a thread of the test process. Its ``/v1/chat/completions`` honours the test-only
    headers ``x-test-fail-first``/``x-test-key`` (see ``simulator.openai_server``) so that tests can
    ask for 429s without restarting it.
    """
    from simulator.openai_server import ServerThread

    server = ServerThread(model="scripted:echo", retry_after=0.3, reasoning="thinking it over")
    server.start()
    try:
        yield server.base_url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def embedded_provider() -> Any:
    """The embedded SmolLM2 GGUF provider, loaded once per session (about 1.2 GB in float32)."""
    from simulator.providers.embedded import embedded_provider as make

    provider = make()
    provider.load()
    return provider
