"""Schema-guided generation with the real embedded model: valid JSON by construction, values chosen by it.

Prompts are short and free-text budgets small (``max_tokens``): two CPU cores are shared.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel

from branchpoint.gateway.completion import Completion, GenParams, Message, ModelError


class Item(BaseModel):
    name: str
    ok: bool


class Small(BaseModel):
    mood: Literal["happy", "sad"]
    sure: bool
    note: str
    quotes: list[str]
    items: list[Item]
    maybe: Literal["x", "y"] | None = None


def _complete(provider: Any, text: str, **params: Any) -> Completion:
    messages = [Message(role="user", content=text)]
    return asyncio.run(provider.complete("embedded", messages, GenParams(**params)))


def test_small_schema_output_is_valid_json_matching_the_schema(embedded_provider: Any) -> None:
    schema = Small.model_json_schema()  # pydantic's own: $defs/$ref, anyOf with null, enums
    assert "$defs" in schema
    before = embedded_provider.guided_calls
    c = _complete(
        embedded_provider,
        "I lost my keys again today. Describe my mood.",
        json_schema=schema,
        temperature=0.0,
        max_tokens=30,
    )
    data = json.loads(c.text)
    jsonschema.validate(data, schema)
    Small.model_validate(data)
    assert list(data) == list(schema["properties"])  # every property, in schema order
    assert c.finish_reason == "stop" and c.tokens_in > 10 and c.tokens_out > 10
    assert embedded_provider.guided_calls == before + 1
    # The free-text budget bounds what the model writes; the structure is completed regardless.
    free = [data["note"], *data["quotes"], *(i["name"] for i in data["items"])]
    generated = sum(
        len(embedded_provider.load().tokenizer.encode(s, add_special_tokens=False)) for s in free
    )
    assert generated <= 30 + len(free)  # a cut token may re-tokenise into two


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What colour is the sky on a clear sunny day? Answer blue or green.", "blue"),
        # The 135M model leans towards the first option named; with green named first it says green.
        ("What colour is grass? Answer green or blue.", "green"),
    ],
)
def test_forced_choice_follows_the_model(
    embedded_provider: Any, question: str, expected: str
) -> None:
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string", "enum": ["blue", "green"]}},
        "required": ["colour"],
    }
    c = _complete(embedded_provider, question, json_schema=schema, temperature=0.0)
    assert json.loads(c.text) == {"colour": expected}


def test_seeded_sampling_repeats_and_unsupported_schema_is_a_model_error(
    embedded_provider: Any,
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "pick": {"enum": ["red", "blue", "green", "yellow"]},
            "why": {"type": "string"},
        },
    }
    runs = [
        _complete(
            embedded_provider,
            "Pick a colour.",
            json_schema=schema,
            temperature=1.0,
            seed=7,
            max_tokens=6,
        ).text
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    jsonschema.validate(json.loads(runs[0]), schema)
    with pytest.raises(ModelError, match="unsupported schema type"):
        _complete(
            embedded_provider,
            "hi",
            json_schema={"type": "object", "properties": {"x": {"type": "date"}}},
        )
