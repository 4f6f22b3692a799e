"""Schema-guided generation for local transformers models: the JSON comes out valid by construction.

Small local models (the embedded SmolLM2-135M above all) almost never write valid JSON on their own,
so a request with ``GenParams.json_schema`` is answered by filling a template instead. This module
walks the schema and writes every piece of JSON structure itself (braces, keys, commas, quotes); the
model is asked only for the values:

- ``enum``, ``const``-like choices and ``boolean``: a forced choice. Each allowed value is scored by
  the log-probability of its tokens after the prompt and the JSON so far; greedy takes the best, a
  temperature samples from the softmax over the options (seeded with ``torch.Generator``).
- ``string``: up to ``string_tokens`` tokens (``item_string_tokens`` inside arrays), greedy or
  sampled, ending at the first ``"`` or newline; the text is JSON-escaped.
- arrays: of strings or objects, each further item is a forced choice between closing the array and
  opening an item (at most ``max_items``, or the schema's ``maxItems``; at least ``minItems``).
  Arrays of other kinds get exactly ``minItems`` items.
- ``$ref``/``$defs``, ``allOf`` with one part, ``anyOf``/``oneOf`` and ``type`` lists with
  ``null``: the non-null branch is used. A nullable enum is filled with a non-null value whenever one
  exists, because the model cannot see cross-field rules (the judge wants a verdict whenever a
  criterion applies; when it does not, the judge ignores the verdict anyway).

Supported: objects (every listed property, in schema order), arrays, enums, booleans, strings,
integers and numbers (digits only, short). Anything else raises ``GuidedSchemaError``.

One KV cache follows the text: the prompt is encoded once, structure and chosen values are appended
to it, option branches are scored on top of it and cropped back. Text between two model decisions
is tokenised together with the option being scored, so token boundaries look natural to the model.

The encoded prompt is also kept (one per model) for the next call: judge prompts for one rubric share
a long system part and differ in the transcript, so later calls encode only what changed.

``GenParams.max_tokens`` caps the tokens the model generates freely (strings and numbers); the
structure is always completed, so a small cap yields short or empty strings, never broken JSON.
``temperature``, ``top_p``, ``seed`` and ``extra["repetition_penalty"]`` (within one string) apply;
``stop`` and the other ``extra`` settings do not. Numbers are clamped to ``minimum``/``maximum``;
``minLength``, ``pattern`` and ``format`` are not enforced.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from branchpoint.gateway.completion import Completion, GenParams, Message

DEFAULT_STRING_TOKENS = 40
DEFAULT_ITEM_STRING_TOKENS = 24
DEFAULT_MAX_ITEMS = 1
_NUMBER_TOKENS = 6


# The KV cache of each model's latest prompt: (model, prompt ids, cache). Used under the model's lock.
_PREFIX: dict[int, tuple[Any, list[int], Any]] = {}


class GuidedSchemaError(ValueError):
    """The schema uses a construct the guided generator does not support."""


@dataclass
class GuidedSettings:
    string_tokens: int = DEFAULT_STRING_TOKENS
    item_string_tokens: int = DEFAULT_ITEM_STRING_TOKENS
    max_items: int = DEFAULT_MAX_ITEMS  # per array, when the schema sets no maxItems
    max_object_items: int = 3  # arrays of objects without maxItems


class _Decoder:
    """Model + KV cache over prompt and JSON so far; ``pending`` is structure not yet fed."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        device: str,
        prompt_ids: list[int],
        temperature: float,
        top_p: float | None,
        seed: int | None,
        eos_ids: set[int],
        repetition_penalty: float | None,
    ) -> None:
        import torch
        from transformers import DynamicCache

        self.torch = torch
        self.model = model
        self.tok = tokenizer
        self.device = device
        self.temperature = temperature
        self.top_p = top_p
        self.eos_ids = eos_ids
        self.repetition_penalty = (
            repetition_penalty if repetition_penalty and repetition_penalty > 0 else None
        )
        self.generator: Any = None
        if temperature > 0:
            self.generator = torch.Generator(device=device)
            if seed is not None:
                self.generator.manual_seed(int(seed))
            else:
                self.generator.seed()
        import inspect

        # Newer transformers name the argument ``cache`` (``past_key_values`` is deprecated there).
        self._cache_arg = (
            "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        )
        self.cache = DynamicCache()
        self.length = 0
        self.reused_prompt_tokens = 0
        self.pending = ""
        self.last_logits: Any = None
        self.free_tokens = 0  # tokens the model generated freely (strings, numbers)
        self._prefill(prompt_ids)

    def _prefill(self, ids: list[int]) -> None:
        """Encode the prompt, reusing the cached prefix it shares with this model's previous prompt.

        Judge prompts for one rubric share a long system part (criteria, anchors) and differ in the
        transcript, so most of the prompt is usually already encoded.
        """
        import copy

        key = id(self.model)
        saved = _PREFIX.get(key)
        if saved is not None and saved[0] is self.model:
            old_ids, old_cache = saved[1], saved[2]
            n = min(len(old_ids), len(ids) - 1)  # keep one token to feed: its logits are needed
            common = 0
            while common < n and old_ids[common] == ids[common]:
                common += 1
            if common >= 32:
                self.cache = copy.deepcopy(old_cache)
                self.length = len(old_ids)
                self._crop(common, None)
                self.reused_prompt_tokens = common
                self._feed(ids[common:])
                _PREFIX[key] = (self.model, list(ids), copy.deepcopy(self.cache))
                return
        self._feed(ids)
        _PREFIX[key] = (self.model, list(ids), copy.deepcopy(self.cache))

    # -- cache -----------------------------------------------------------------------------------

    def _forward(self, ids: list[int], last_only: bool = False) -> Any:
        torch = self.torch
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)
        # Only the last position's logits are needed when feeding: skip the vocabulary projection
        # for the others (it is a tenth of the model's work per token).
        kw = {"logits_to_keep": 1} if last_only else {}
        kw[self._cache_arg] = self.cache
        out = self.model(input_ids=inp, use_cache=True, **kw)
        self.length += len(ids)
        return out.logits[0]

    def _feed(self, ids: list[int]) -> None:
        if ids:
            self.last_logits = self._forward(ids, last_only=True)[-1]

    def _crop(self, length: int, logits: Any) -> None:
        remove = self.length - length
        if remove > 0:  # a negative count removes tokens in every transformers version
            self.cache.crop(-remove)
        self.length = length
        self.last_logits = logits

    def _encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def emit(self, text: str) -> None:
        """Structure: fed to the model later, together with whatever is decided next."""
        self.pending += text

    def flush(self) -> None:
        if self.pending:
            self._feed(self._encode(self.pending))
            self.pending = ""

    # -- forced choice -----------------------------------------------------------------------------

    def choose(self, options: list[str]) -> int:
        """Index of the chosen option; its text becomes part of the model's view of the JSON.

        Options whose tokens (after the shared prefix) start with different tokens are told apart by
        that first token alone: one look at the logits already in hand, no forward pass. Otherwise
        each option's whole continuation is scored (a forward pass per option, cropped back after).
        """
        torch = self.torch
        if len(options) == 1:
            self.emit(options[0])
            return 0
        full = [self.pending + o for o in options]
        seqs = [self._encode(f) for f in full]
        common = 0
        while (
            all(len(seq) > common + 1 for seq in seqs) and len({seq[common] for seq in seqs}) == 1
        ):
            common += 1
        self._feed(seqs[0][:common])
        self.pending = ""
        base_len, base_logits = self.length, self.last_logits
        base_logp = torch.log_softmax(base_logits.float(), dim=-1)
        first_only = len({seq[common] for seq in seqs}) == len(seqs)
        scores = []
        for seq in seqs:
            rest = seq[common:]
            logp = base_logp[rest[0]]
            if len(rest) > 1 and not first_only:
                logps = torch.log_softmax(self._forward(rest[:-1]).float(), dim=-1)
                idx = torch.tensor(rest[1:], device=logps.device)
                logp = logp + logps.gather(1, idx[:, None]).sum()
                self._crop(base_len, base_logits)
            scores.append(float(logp))
        if self.generator is None:
            pick = max(range(len(options)), key=lambda i: scores[i])
        else:
            weights = torch.softmax(torch.tensor(scores) / self.temperature, dim=0)
            pick = int(torch.multinomial(weights.to(self.device), 1, generator=self.generator))
        # The chosen tokens wait as text, to be encoded together with the structure that follows.
        fed = self.tok.decode(seqs[pick][:common])
        if full[pick].startswith(fed):
            self.pending = full[pick][len(fed) :]
        else:
            self._feed(seqs[pick][common:])
        return pick

    # -- free text ---------------------------------------------------------------------------------

    def _next_token(self, logits: Any, seen: list[int], allowed: Any = None) -> int:
        torch = self.torch
        logits = logits.float().clone()
        if self.repetition_penalty and seen:
            idx = torch.tensor(sorted(set(seen)), device=logits.device)
            vals = logits[idx]
            logits[idx] = torch.where(
                vals > 0, vals / self.repetition_penalty, vals * self.repetition_penalty
            )
        if allowed is not None:
            mask = torch.full_like(logits, float("-inf"))
            mask[allowed] = 0.0
            logits = logits + mask
        if self.generator is None:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / self.temperature, dim=-1)
        if self.top_p is not None and 0 < self.top_p < 1:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, dim=0) - sorted_p < self.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def generate(self, cap: int, stop_chars: str, allowed: Any = None) -> str:
        """Up to ``cap`` tokens of text, cut at the first of ``stop_chars``. The cache ends after it."""
        self.flush()
        start_len, start_logits = self.length, self.last_logits
        ids: list[int] = []
        text = ""
        while len(ids) < cap:
            t = self._next_token(self.last_logits, ids, allowed)
            if t in self.eos_ids:
                break
            ids.append(t)
            self.free_tokens += 1
            text = self.tok.decode(ids, skip_special_tokens=True)
            cut = min((p for p in (text.find(c) for c in stop_chars) if p >= 0), default=-1)
            if cut >= 0:
                # The stopping token is never fed: the cache holds ids[:-1], and what the stopping
                # token held before the stop char waits as pending text.
                value = text[:cut]
                before = self.tok.decode(ids[:-1], skip_special_tokens=True)
                if value.startswith(before):
                    self.pending = value[len(before) :]
                else:  # a multi-byte character split across tokens: start the value over as text
                    self._crop(start_len, start_logits)
                    self.pending = value
                return value
            self._feed([t])
        return text


def _resolver(root: dict[str, Any]) -> Any:
    defs = {**root.get("definitions", {}), **root.get("$defs", {})}

    def resolve(node: Any, depth: int = 0) -> dict[str, Any]:
        if depth > 32:
            raise GuidedSchemaError("schema $ref nesting is too deep")
        if node is True or node == {}:
            return {"type": "string"}
        if not isinstance(node, dict):
            raise GuidedSchemaError(f"schema node {node!r} is not an object")
        if "$ref" in node:
            ref = node["$ref"]
            name = ref.rsplit("/", 1)[-1]
            if not ref.startswith("#/") or name not in defs:
                raise GuidedSchemaError(f"unresolvable $ref {ref!r}")
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return resolve({**defs[name], **rest}, depth + 1)
        if "allOf" in node:
            parts = node["allOf"]
            if len(parts) != 1:
                raise GuidedSchemaError("allOf with more than one part is not supported")
            rest = {k: v for k, v in node.items() if k != "allOf"}
            return resolve({**resolve(parts[0], depth + 1), **rest}, depth + 1)
        for key in ("anyOf", "oneOf"):
            if key in node:
                branches = [
                    b for b in node[key] if not (isinstance(b, dict) and b.get("type") == "null")
                ]
                rest = {k: v for k, v in node.items() if k != key}
                if not branches:
                    return {**rest, "type": "null"}
                return resolve({**rest, **resolve(branches[0], depth + 1)}, depth + 1)
        return node

    return resolve


def _estimate(
    node: dict[str, Any], resolve: Any, s: GuidedSettings, in_array: bool = False, depth: int = 0
) -> int:
    """A rough upper bound on output tokens, to keep room for them when the prompt is truncated."""
    node = resolve(node)
    if depth > 16:
        return 0
    if "enum" in node or "const" in node:
        values = node.get("enum", [node.get("const")])
        return 2 + max((len(json.dumps(v)) for v in values), default=4) // 2
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = node.get("properties", {})
        return 2 + sum(
            4 + len(k) // 2 + _estimate(v, resolve, s, False, depth + 1) for k, v in props.items()
        )
    if kind == "array":
        items = resolve(node.get("items", {}))
        n = max(int(node.get("minItems", 0)), _max_items(node, items, s))
        return 2 + n * (2 + _estimate(items, resolve, s, True, depth + 1))
    if kind == "string":
        return 2 + (s.item_string_tokens if in_array else s.string_tokens)
    return _NUMBER_TOKENS + 1


def _max_items(node: dict[str, Any], items: dict[str, Any], s: GuidedSettings) -> int:
    if "maxItems" in node:
        return int(node["maxItems"])
    return s.max_object_items if items.get("type") == "object" else s.max_items


class _Filler:
    def __init__(
        self, dec: _Decoder, root: dict[str, Any], settings: GuidedSettings, budget: int
    ) -> None:
        self.dec = dec
        self.resolve = _resolver(root)
        self.s = settings
        self.budget = budget
        self.out: list[str] = []

    def text(self, t: str) -> None:
        self.out.append(t)
        self.dec.emit(t)

    def choice(self, options: list[str]) -> str:
        pick = options[self.dec.choose(options)]
        self.out.append(pick)
        return pick

    def _cap(self, cap: int) -> int:
        return max(0, min(cap, self.budget - self.dec.free_tokens))

    def value(self, node: Any, in_array: bool = False, depth: int = 0) -> None:
        if depth > 32:
            raise GuidedSchemaError("schema nesting is too deep")
        node = self.resolve(node)
        if "const" in node:
            self.text(json.dumps(node["const"], ensure_ascii=False))
            return
        if "enum" in node:
            values = [v for v in node["enum"] if v is not None] or [None]
            self.choice([json.dumps(v, ensure_ascii=False) for v in values])
            return
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None and "properties" in node:
            kind = "object"
        if kind == "object":
            self.object(node, depth)
        elif kind == "array":
            self.array(node, depth)
        elif kind == "string":
            self.string(self.s.item_string_tokens if in_array else self.s.string_tokens, node)
        elif kind == "boolean":
            self.choice(["true", "false"])
        elif kind in ("integer", "number"):
            self.number(kind == "integer", node)
        elif kind == "null":
            self.text("null")
        else:
            raise GuidedSchemaError(f"unsupported schema type {kind!r}")

    def object(self, node: dict[str, Any], depth: int, opened: bool = False) -> None:
        props: dict[str, Any] = node.get("properties", {})
        if not opened:
            self.text("{")
        for i, (key, sub) in enumerate(props.items()):
            self.text(("" if i == 0 else ", ") + json.dumps(key, ensure_ascii=False) + ": ")
            self.value(sub, False, depth + 1)
        self.text("}")

    def array(self, node: dict[str, Any], depth: int) -> None:
        items = self.resolve(node.get("items", {}))
        low = int(node.get("minItems", 0))
        high = max(low, _max_items(node, items, self.s))
        kind = items.get("type")
        opener = (
            {"string": '"', "object": "{"}.get(kind)
            if not ("enum" in items or "const" in items)
            else None
        )
        if opener is None:
            high = low  # no single opening character to weigh against "]": emit the minimum
        self.text("[")
        n = 0
        while n < high:
            sep = "" if n == 0 else ", "
            if n >= low:
                assert opener is not None
                if self.choice(["]", sep + opener]) == "]":
                    return
                if opener == '"':
                    self.string(self.s.item_string_tokens, items, opened=True)
                else:
                    self.object(items, depth + 1, opened=True)
            else:
                self.text(sep)
                self.value(items, True, depth + 1)
            n += 1
        self.text("]")

    def string(self, cap: int, node: dict[str, Any], opened: bool = False) -> None:
        if not opened:
            self.text('"')
        raw = self.dec.generate(self._cap(cap), '"\n')
        if "maxLength" in node:
            raw = raw[: int(node["maxLength"])]
        self.out.append(json.dumps(raw, ensure_ascii=False)[1:-1])
        self.text('"')

    def number(self, integer: bool, node: dict[str, Any]) -> None:
        raw = self.dec.generate(
            self._cap(_NUMBER_TOKENS), ' ,}]\n"', _numeric_ids(self.dec, integer)
        ).strip()
        try:
            value: Any = int(raw) if integer else float(raw)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError
        except ValueError:
            value = 0
        if isinstance(node.get("minimum"), (int, float)):
            value = max(value, node["minimum"])
        if isinstance(node.get("maximum"), (int, float)):
            value = min(value, node["maximum"])
        self.out.append(json.dumps(int(value) if integer else value))


_NUMERIC: dict[tuple[int, bool], Any] = {}


def _numeric_ids(dec: _Decoder, integer: bool) -> Any:
    """Token ids made only of digits (and '.', '-' for numbers), once per tokenizer."""
    key = (id(dec.tok), integer)
    if key not in _NUMERIC:
        chars = set("0123456789" if integer else "0123456789.-")
        ends = {",", "}", "]", "\n", " "}  # let the number end: generate() cuts at these
        ids = [
            i
            for i in range(len(dec.tok))
            if (t := dec.tok.decode([i])) and (set(t) <= chars or t in ends)
        ]
        _NUMERIC[key] = dec.torch.tensor(ids, device=dec.device)
    return _NUMERIC[key]


def prompt_ids(tokenizer: Any, messages: list[Message]) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in messages],
        tokenize=False,
        add_generation_prompt=True,
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def guided_complete(
    model: Any,
    tokenizer: Any,
    device: str,
    max_positions: int,
    messages: list[Message],
    params: GenParams,
    *,
    eos_ids: set[int],
    model_name: str = "",
    settings: GuidedSettings | None = None,
    default_max_new_tokens: int = 4096,
) -> Completion:
    """Fill ``params.json_schema`` from the model. Call with the model's lock held, in inference mode."""
    schema = params.json_schema
    if not isinstance(schema, dict):
        raise GuidedSchemaError("json_schema must be an object")
    s = settings or GuidedSettings()
    resolve = _resolver(schema)
    reserve = min(max_positions // 2, _estimate(schema, resolve, s) + 16)
    ids = prompt_ids(tokenizer, messages)
    tokens_in = len(ids)
    limit = max(16, max_positions - reserve)
    if len(ids) > limit:  # over-long transcripts lose their oldest tokens, as in free generation
        ids = ids[-limit:]
        tokens_in = len(ids)
    temperature = float(params.temperature) if params.temperature is not None else 1.0
    extra = params.extra or {}
    dec = _Decoder(
        model,
        tokenizer,
        device,
        ids,
        temperature,
        params.top_p,
        params.seed,
        eos_ids,
        extra.get("repetition_penalty"),
    )
    budget = int(params.max_tokens or default_max_new_tokens)
    filler = _Filler(dec, schema, s, budget)
    filler.value(schema)
    text = "".join(filler.out)
    tokens_out = len(tokenizer.encode(text, add_special_tokens=False))
    return Completion(
        text=text,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        cost=0.0,
        finish_reason="stop",
        model=model_name,
    )
