"""What a model call costs: USD per token (from litellm's local price map or a given price), and
token counts that price themselves. Local models (embedded, hf:, scripted:) cost nothing; a model
with neither a map entry nor a given price is unpriced (None). Calls sent through a batch API
cost the map's batch price, or ``BATCH_FACTOR`` of the list price (``batch_price_of``).

Input tokens a provider's prompt cache served are billed at the cached rate (OpenAI's automatic
prefix cache: half or less of the input price; Anthropic's ``cache_control`` reads: a tenth; its
cache writes: 1.25 times), so a call's tokens carry how many of its input tokens were cached
reads and cache writes (``Tokens.cached``, ``Tokens.cache_write``) and a price carries those rates
(None: billed as any input token)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

LOCAL_KINDS = ("embedded", "hf", "scripted")
# What a provider's batch API charges as a share of its list price where litellm's map has no
# batch price for the model: OpenAI's and Anthropic's batch APIs both bill half.
BATCH_FACTOR = 0.5
# The share of input tokens a provider's prompt cache is assumed to serve in a plan's expected
# cost (where the model has a cached rate): judge prompts laid out for caching measured 85-90%
# on an OpenAI-style prefix cache, a conversation's calls resend their history; half is a
# middle guess. A plan's low cost assumes every input token cached, its high cost none.
EXPECTED_CACHE_SHARE = 0.5
# The cache share each level of a plan assumes: low (a floor) every input token cached, high
# (a ceiling) none; matters only for models with a cached rate below their input rate.
PLAN_CACHE_SHARE = {"low": 1.0, "expected": EXPECTED_CACHE_SHARE, "high": 0.0}

# USD per million tokens as given (a manifest's ``price:``): (input, output), optionally with the
# cached-input and cache-write rates (None: as input).
PerMtok = Sequence[float | None]


@dataclass(frozen=True)
class Price:
    """USD per token; ``cached_input`` and ``cache_write`` None: billed at ``input``."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def scaled(self, factor: float) -> Price:
        """This price times ``factor`` (a batch API's share of the list price)."""

        def times(rate: float | None) -> float | None:
            return None if rate is None else rate * factor

        return Price(
            self.input * factor,
            self.output * factor,
            times(self.cached_input),
            times(self.cache_write),
        )


@dataclass
class Tokens:
    """A call's tokens; ``input`` counts them all, ``cached`` (cache reads) and ``cache_write``
    are the parts of ``input`` billed at those rates."""

    input: int = 0
    output: int = 0
    cached: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output

    def add(self, other: Tokens) -> None:
        self.input += other.input
        self.output += other.output
        self.cached += other.cached
        self.cache_write += other.cache_write

    def with_cache_share(self, share: float) -> Tokens:
        """These tokens with ``share`` of the input served by a prompt cache (a plan's guess)."""
        return replace(self, cached=round(self.input * share), cache_write=0)

    def usd(self, price: Price) -> float:
        cached = min(self.cached, self.input)
        written = min(self.cache_write, self.input - cached)
        plain = self.input - cached - written
        read_rate = price.input if price.cached_input is None else price.cached_input
        write_rate = price.input if price.cache_write is None else price.cache_write
        return (
            plain * price.input
            + cached * read_rate
            + written * write_rate
            + self.output * price.output
        )


def _given(override: PerMtok) -> Price:
    values = list(override) + [None] * (4 - len(override))
    inp, out, cached, write = values[:4]
    assert inp is not None and out is not None  # a manifest's price has both

    def per_token(rate: float | None) -> float | None:
        return None if rate is None else rate / 1e6

    return Price(inp / 1e6, out / 1e6, per_token(cached), per_token(write))


def _map_price(entry: dict[str, object], suffix: str = "") -> Price | None:
    """The price in one entry of litellm's map (``suffix``: ``_batches`` for its batch price)."""
    inp = entry.get(f"input_cost_per_token{suffix}")
    if inp is None:
        return None
    list_input = entry.get("input_cost_per_token")

    def rate(name: str) -> float | None:
        value = entry.get(name)
        if value is None:
            return None
        if suffix and list_input:  # the map keeps cache rates at list price: scale them alike
            return float(value) * float(inp) / float(list_input)  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]

    return Price(
        float(inp),  # type: ignore[arg-type]
        float(entry.get(f"output_cost_per_token{suffix}") or 0),  # type: ignore[arg-type]
        rate("cache_read_input_token_cost"),
        rate("cache_creation_input_token_cost"),
    )


def price_of(spec: str, override: PerMtok | None = None) -> Price | None:
    """The price of a model spec per token; ``override`` is USD per million (input, output[,
    cached input[, cache write]])."""
    from branchpoint.gateway.specs import parse_spec

    if override is not None:
        return _given(override)
    parsed = parse_spec(spec)
    if parsed.kind in LOCAL_KINDS:
        return Price(0.0, 0.0)
    import litellm

    names = [parsed.model, parsed.model.split("/", 1)[-1]]
    for name in names:
        entry = litellm.model_cost.get(name)
        if entry:
            found = _map_price(entry)
            if found is not None:
                return found
    return None


def batch_price_of(
    spec: str, override: PerMtok | None = None, factor: float | None = None
) -> Price | None:
    """The price per token of ``spec``'s calls through a batch API: ``factor`` (default
    ``BATCH_FACTOR``) of the list price, or, with neither a given price (``override``, USD per
    million) nor a factor, the batch price litellm's map has for the model where it has one."""
    if override is None and factor is None:
        from branchpoint.gateway.specs import parse_spec

        parsed = parse_spec(spec)
        if parsed.kind not in LOCAL_KINDS:
            import litellm

            for name in (parsed.model, parsed.model.split("/", 1)[-1]):
                found = _map_price(litellm.model_cost.get(name) or {}, "_batches")
                if found is not None:
                    return found
    price = price_of(spec, override)
    return None if price is None else price.scaled(BATCH_FACTOR if factor is None else factor)
