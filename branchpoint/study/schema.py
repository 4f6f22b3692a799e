"""The manifest's JSON Schema, for editors (``branchpoint schema sweep``)."""

from __future__ import annotations

from typing import Any

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def manifest_json_schema() -> dict[str, Any]:
    from branchpoint.study.manifest import Manifest

    schema = Manifest.model_json_schema()
    # Targets, simulators and the detector also take the short form ``SPEC``.
    spec = {"type": "string", "minLength": 1}
    for name in ("targets", "simulators"):
        role = schema["properties"][name]
        role["items"] = {"anyOf": [spec, role["items"]]}
    detector = schema["properties"]["detector"]
    detector["anyOf"] = [spec, *detector["anyOf"]]
    return {
        "$schema": DRAFT,
        "title": "branchpoint sweep manifest",
        **{k: v for k, v in schema.items() if k != "title"},
    }
