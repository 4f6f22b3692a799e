"""Spec strings and params as users write them."""

from __future__ import annotations

import pytest

from branchpoint.core.errors import UserError
from branchpoint.gateway.specs import params_from, params_from_pairs, parse_spec


@pytest.mark.parametrize(
    "raw,kind,model",
    [
        ("embedded", "embedded", ""),
        ("hf:Qwen/Qwen2.5-7B-Instruct", "hf", "Qwen/Qwen2.5-7B-Instruct"),
        ("hf:/models/local dir", "hf", "/models/local dir"),
        (" litellm:openai/gpt-4o-mini ", "litellm", "openai/gpt-4o-mini"),
        ("oai:my-model", "oai", "my-model"),
        ("scripted:teen-bot", "scripted", "teen-bot"),
    ],
)
def test_parse_known_specs(raw: str, kind: str, model: str) -> None:
    spec = parse_spec(raw)
    assert (spec.kind, spec.model) == (kind, model)


@pytest.mark.parametrize("raw", ["gpt-4o", "openai:gpt-4o", "embedded:x", "", "vllm:foo"])
def test_unknown_spec_lists_prefixes_on_one_line(raw: str) -> None:
    with pytest.raises(UserError) as info:
        parse_spec(raw)
    msg = str(info.value)
    assert "\n" not in msg
    for prefix in ("embedded", "hf:", "litellm:", "oai:", "scripted:"):
        assert prefix in msg


@pytest.mark.parametrize(
    "raw,needle", [("hf:", "names no model"), ("litellm:gpt-4o", "litellm:openai/gpt-4o")]
)
def test_incomplete_specs_say_what_is_expected(raw: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        parse_spec(raw)


def test_params_from_yaml_mapping() -> None:
    p = params_from(
        {
            "temperature": 0.7,
            "max_tokens": 64,
            "seed": 3,
            "stop": "END",
            "top_k": 40,
            "api_base": "http://127.0.0.1:8000/v1",
        }
    )
    assert (p.temperature, p.max_tokens, p.seed, p.stop) == (0.7, 64, 3, ["END"])
    assert p.api_base == "http://127.0.0.1:8000/v1" and p.extra == {"top_k": 40}


def test_bad_param_value_names_place_and_field() -> None:
    with pytest.raises(UserError, match=r"sweep.yaml: targets\[0\]: max_tokens: .*'lots'"):
        params_from({"max_tokens": "lots"}, where="sweep.yaml: targets[0]")


def test_params_from_cli_pairs() -> None:
    p = params_from_pairs(["temperature=0", "seed=5", "api_base=http://127.0.0.1:1/v1"])
    assert (p.temperature, p.seed, p.api_base) == (0, 5, "http://127.0.0.1:1/v1")
    with pytest.raises(UserError, match="NAME=VALUE"):
        params_from_pairs(["temperature"])
