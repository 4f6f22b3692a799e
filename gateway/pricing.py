"""What a model call costs: USD per token (from litellm's local price map or a given price), and
token counts that price themselves. Local models (embedded, hf:, scripted:) cost nothing; a model
with neither a map entry nor a given price is unpriced (None). Calls sent through a batch API
cost ``BATCH_FACTOR`` of the list price unless a price config says otherwise."""

from __future__ import annotations

from dataclasses import dataclass

LOCAL_KINDS = ("embedded", "hf", "scripted")
# What a provider's batch API charges as a share of its list price: OpenAI's and Anthropic's
# batch APIs both bill half (a judge's ``batch_factor`` in a price config says otherwise).
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
    from gateway.specs import parse_spec

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
