"""The JSON schema sent for a model's structured answer, generated from the pydantic model that
parses the answer, so the two cannot drift apart.

OpenAI-style strict structured output (``branchpoint/gateway/structured.py``, mode ``json_schema``) needs every
object to list all its properties as required and to forbid others; ``answer_schema`` checks that
and fails loudly for a model that does not meet it, instead of sending a schema a provider rejects.
Titles and defaults are left out: pydantic derives titles from class and field names, which tell
the model nothing, and a default is a leniency of parsing, while the schema asks for every field;
the schema is also part of a call's cache key, so names in code must not change it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["answer_schema"]


_KEY_ORDER = ("title", "type", "properties", "required", "additionalProperties", "enum", "items")


def _asked_for(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_asked_for(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if (key == "title" and isinstance(value, str)) or key == "default":
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            # a mapping of names to schemas: a property may itself be called "title"
            out[key] = {name: _asked_for(sub) for name, sub in value.items()}
        else:
            out[key] = _asked_for(value)
    # Keys in the order people write them (pydantic sorts them), so the request reads as before.
    first = [k for k in _KEY_ORDER if k in out]
    return {k: out[k] for k in [*first, *(k for k in out if k not in _KEY_ORDER)]}


def _check_strict(schema: Any, where: str) -> None:
    if isinstance(schema, list):
        for i, s in enumerate(schema):
            _check_strict(s, f"{where}[{i}]")
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            raise ValueError(f"{where}: strict structured output needs additionalProperties false")
        missing = sorted(set(props) - set(schema.get("required", [])))
        if missing:
            raise ValueError(f"{where}: strict structured output needs {missing} required")
        for name, sub in props.items():
            _check_strict(sub, f"{where}.{name}")
    for key, value in schema.items():
        if key != "properties":
            _check_strict(value, f"{where}.{key}")


def answer_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema as sent for a structured answer: strict-mode ready, no defaults,
    no titles but the model's own ``title`` when its config sets one.

    The schema is the serialization one: what a complete answer holds. A model that parses
    leniently (a field with a default) sets ``json_schema_serialization_defaults_required`` so
    that the field is still required in what is asked for.
    """
    schema: dict[str, Any] = _asked_for(model.model_json_schema(mode="serialization"))
    title = model.model_config.get("title")
    if title:
        schema = {"title": title, **schema}
    _check_strict(schema, model.__name__)
    return schema
