"""The embedded model's defaults that size the embedded quickstart (docs/getting-started.md) (issue 37): replies of at most
``REPLY_TOKENS`` new tokens whatever is asked (schema-guided answers exempt), and torch threads
that leave the cores other work holds (spinning threads on a busy core were 3-7x slower).
Nothing here loads the weights."""

from __future__ import annotations

import pytest

from branchpoint.gateway.completion import GenParams
from branchpoint.gateway.providers.embedded import REPLY_TOKENS, embedded_provider
from branchpoint.gateway.providers.hf import HFProvider, cpu_threads


def test_an_embedded_reply_is_capped_whatever_the_caller_asks() -> None:
    provider = embedded_provider()
    for asked in (None, 96, 120, 4096):  # the target's default, the persona's 96, more
        merged, max_new, _ = provider._resolve(GenParams(max_tokens=asked))
        assert max_new == REPLY_TOKENS and merged.max_tokens == REPLY_TOKENS
    _, max_new, _ = provider._resolve(GenParams(max_tokens=20))
    assert max_new == 20  # a shorter request stays as asked


def test_a_schema_guided_answer_is_not_cut_short() -> None:
    provider = embedded_provider()
    schema = {"type": "object", "properties": {"verdict": {"type": "string"}}}
    _, max_new, _ = provider._resolve(GenParams(max_tokens=400, json_schema=schema))
    assert max_new == 400


def test_other_local_models_are_not_capped() -> None:
    _, max_new, _ = HFProvider("some/model")._resolve(GenParams(max_tokens=400))
    assert max_new == 400


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 2), (4, 3), (16, 8)])
def test_torch_threads_leave_a_core_free_on_bigger_machines(
    cores: int, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BRANCHPOINT_TORCH_THREADS", raising=False)
    assert cpu_threads(cores) == threads


def test_torch_threads_do_not_follow_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seeded run gets the same thread split (and so the same float sums) on a busy machine."""
    monkeypatch.delenv("BRANCHPOINT_TORCH_THREADS", raising=False)
    monkeypatch.setattr("os.getloadavg", lambda: (6.0, 6.0, 6.0))
    assert cpu_threads(2) == 2


def test_the_environment_sets_the_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRANCHPOINT_TORCH_THREADS", "3")
    assert cpu_threads(2) == 3
