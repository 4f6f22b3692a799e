"""What a model call costs: USD per token (from litellm's local price map or a given price), and
token counts that price themselves. Local models (embedded, hf:, scripted:) cost nothing; a model
with neither a map entry nor a given price is unpriced (None). Calls sent through a batch API
cost the map's batch price, or ``BATCH_FACTOR`` of the list price (``batch_price_of``)."""

from __future__ import annotations

from dataclasses import dataclass

LOCAL_KINDS = ("embedded", "hf", "scripted")
# What a provider's batch API charges as a share of its list price where litellm's map has no
# batch price for the model: OpenAI's and Anthropic's batch APIs both bill half.
BATCH_FACTOR = 0.5


@dataclass(frozen=True)
class Price:
    """USD per token."""

    input: float
    output: float

    def scaled(self, factor: float) -> Price:
        """This price times ``factor`` (a batch API's share of the list price)."""
        return Price(self.input * factor, self.output * factor)


@dataclass
class Tokens:
    input: int = 0
    output: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output

    def add(self, other: Tokens) -> None:
        self.input += other.input
        self.output += other.output

    def usd(self, price: Price) -> float:
        return self.input * price.input + self.output * price.output


def price_of(spec: str, override: tuple[float, float] | None = None) -> Price | None:
    """The price of a model spec per token; ``override`` is USD per million (input, output)."""
    from branchpoint.gateway.specs import parse_spec

    if override is not None:
        return Price(override[0] / 1e6, override[1] / 1e6)
    parsed = parse_spec(spec)
    if parsed.kind in LOCAL_KINDS:
        return Price(0.0, 0.0)
    import litellm

    names = [parsed.model, parsed.model.split("/", 1)[-1]]
    for name in names:
        entry = litellm.model_cost.get(name)
        if entry and entry.get("input_cost_per_token") is not None:
            return Price(
                float(entry["input_cost_per_token"]), float(entry.get("output_cost_per_token") or 0)
            )
    return None


def batch_price_of(
    spec: str, override: tuple[float, float] | None = None, factor: float | None = None
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
                entry = litellm.model_cost.get(name) or {}
                if entry.get("input_cost_per_token_batches") is not None:
                    return Price(
                        float(entry["input_cost_per_token_batches"]),
                        float(entry.get("output_cost_per_token_batches") or 0),
                    )
    price = price_of(spec, override)
    return None if price is None else price.scaled(BATCH_FACTOR if factor is None else factor)
