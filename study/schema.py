"""The manifest's JSON Schema, for editors (``branchpoint schema sweep``)."""

from __future__ import annotations

from typing import Any

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def manifest_json_schema() -> dict[str, Any]:
    from study.manifest import Manifest

    schema = Manifest.model_json_schema()
    # Targets also take the short form ``- SPEC``.
    targets = schema["properties"]["targets"]
    targets["items"] = {"anyOf": [{"type": "string", "minLength": 1}, targets["items"]]}
    return {
        "$schema": DRAFT,
        "title": "branchpoint sweep manifest",
        **{k: v for k, v in schema.items() if k != "title"},
    }
