"""branchpoint.core.answer_schema: the schema sent for a structured answer is generated from the model that
parses it, and is fit for strict structured output (every property required, no others)."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ConfigDict, Field

from branchpoint.core.answer_schema import answer_schema


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)
    title: str  # a property may be called "title": only schema titles are dropped
    default: int = 0
    notes: list[str] = Field(default_factory=list)


class _Answer(BaseModel):
    model_config = ConfigDict(
        extra="forbid", title="my_answer", json_schema_serialization_defaults_required=True
    )
    ok: bool
    inner: _Inner


def test_the_schema_has_no_titles_or_defaults_and_requires_everything() -> None:
    schema = answer_schema(_Answer)
    assert list(schema)[:5] == ["title", "type", "properties", "required", "additionalProperties"]
    assert schema["title"] == "my_answer" and schema["required"] == ["ok", "inner"]
    assert schema["properties"]["inner"] == {"$ref": "#/$defs/_Inner"}  # nesting stays pydantic's
    inner = schema["$defs"]["_Inner"]
    assert inner == {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "default": {"type": "integer"},
            "notes": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["title", "default", "notes"],
        "additionalProperties": False,
    }
    shown = json.dumps(schema)
    assert '"title": "_Inner"' not in shown and '"default": 0' not in shown


def test_a_model_strict_mode_cannot_take_is_refused() -> None:
    class Open(BaseModel):  # extra keys allowed: strict mode needs additionalProperties false
        a: int

    class Optional(BaseModel):  # a default without defaults_required: not required
        model_config = ConfigDict(extra="forbid")
        a: int = 0

    with pytest.raises(ValueError, match="additionalProperties false"):
        answer_schema(Open)
    with pytest.raises(ValueError, match=r"\['a'\] required"):
        answer_schema(Optional)
