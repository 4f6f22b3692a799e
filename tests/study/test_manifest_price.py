"""A manifest's price (USD per million tokens) becomes the gateway's per-token price in one place,
``branchpoint.study.manifest.Price.per_mtok``, for a target's and a judge's price alike."""

from __future__ import annotations

import pytest

from branchpoint.gateway.pricing import Price as GatewayPrice
from branchpoint.gateway.pricing import batch_price_of, price_of
from branchpoint.study.judge_estimate import _batch_price
from branchpoint.study.manifest import JudgeEntry, Price


def test_the_manifest_price_is_the_gateway_price_per_token() -> None:
    given = Price(input_per_mtok=3.0, output_per_mtok=15.0)
    assert given.per_mtok() == (3.0, 15.0, None, None)
    price = price_of("litellm:some/unknown-model", given.per_mtok())
    assert price == GatewayPrice(pytest.approx(3e-6), pytest.approx(1.5e-5))


def test_a_manifest_price_carries_the_cached_and_cache_write_rates() -> None:
    given = Price(
        input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3,
        cache_write_per_mtok=3.75,
    )  # fmt: skip
    price = price_of("litellm:some/unknown-model", given.per_mtok())
    assert price is not None
    assert price.cached_input == pytest.approx(0.3e-6)
    assert price.cache_write == pytest.approx(3.75e-6)
    # a batch bills its share of every rate
    batched = batch_price_of("litellm:some/unknown-model", given.per_mtok(), 0.5)
    assert batched is not None and batched.cached_input == pytest.approx(0.15e-6)


def test_a_judges_batch_price_uses_its_manifest_price_and_factor() -> None:
    judge = JudgeEntry(
        spec="litellm:some/unknown-model",
        rubrics=["ed"],
        price=Price(input_per_mtok=2.0, output_per_mtok=8.0, batch_factor=0.25),
    )
    assert judge.price is not None
    expected = batch_price_of(judge.spec, (2.0, 8.0), 0.25)
    assert expected == GatewayPrice(pytest.approx(0.5e-6), pytest.approx(2e-6))
    assert _batch_price(judge) == expected
