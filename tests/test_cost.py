"""The spending cap (ApiConfig.max_cost): the request that could pass it is never sent; what was
paid stays cached."""

from __future__ import annotations

import asyncio

import pytest

from blackbox_mia.backends.api.client import ApiClient, BudgetExceeded
from blackbox_mia.backends.api.usage import Budget, request_cost
from blackbox_mia.cache import ResponseCache
from blackbox_mia.types import BlackboxMIAError

from .helpers_client import MODEL, config

DOLLAR_A_TOKEN = {MODEL: (1e6, 1e6)}  # USD per 1M prompt / completion tokens: $1 a token


def test_request_cost_and_budget_reservations():
    assert request_cost(3, 1, (2.0, 8.0)) == pytest.approx(14e-6) and request_cost(3, 1, None) == 0.0
    budget = Budget(10.0)
    budget.reserve(spent=4.0, cost=4.0)  # 4 + 0 + 4 <= 10
    with pytest.raises(BudgetExceeded, match=r"--max-cost \$10.*\$4.0000 spent, \$4.0000 in flight"):
        budget.reserve(spent=4.0, cost=4.0)  # 4 + 4 in flight + 4 > 10
    budget.settle(4.0)
    budget.reserve(spent=6.0, cost=4.0)  # exactly at the cap is allowed
    assert budget.reserved == 4.0


def test_max_cost_needs_a_price_and_a_sane_value(fake):
    with pytest.raises(BlackboxMIAError, match="needs the price of model 'fake-model'"):
        config("http://127.0.0.1:9/v1", max_cost=1.0)
    with pytest.raises(BlackboxMIAError, match="max_cost must be"):
        config("http://127.0.0.1:9/v1", max_cost=-1.0, prices=DOLLAR_A_TOKEN)
    assert "max_cost" not in config("http://127.0.0.1:9/v1", max_cost=1.0, prices=DOLLAR_A_TOKEN).describe()


async def test_stops_before_the_request_that_would_pass_the_cap(make_client, fake, tmp_path):
    # each request: prompt [i, i, i] (3 tokens) + max_tokens 1 -> worst case $4, billed $4
    client = make_client(prices=DOLLAR_A_TOKEN, max_cost=10.0)
    await client.complete([1, 1, 1])
    await client.complete([2, 2, 2])
    with pytest.raises(BudgetExceeded, match=r"\$8.0000 spent.*rerun with a higher --max-cost"):
        await client.complete([3, 3, 3])
    assert fake.hits == 2 and client.usage.cost_usd == pytest.approx(8.0) and client.usage.requests == 2
    # a rerun with a higher cap gets the paid answers from the cache for free and continues
    rerun = make_client(prices=DOLLAR_A_TOKEN, max_cost=12.0)
    for i in (1, 2, 3):
        await rerun.complete([i, i, i])
    assert fake.hits == 3 and rerun.usage.cost_usd == pytest.approx(4.0) and rerun.usage.cache_hits == 2


async def test_requests_in_flight_count_against_the_cap(make_client, fake):
    fake.delay_s = 0.2
    client = make_client(prices=DOLLAR_A_TOKEN, max_cost=10.0, concurrency=3)
    results = await asyncio.gather(*(client.complete([i, i, i]) for i in range(3)), return_exceptions=True)
    refused = [r for r in results if isinstance(r, BudgetExceeded)]
    assert len(refused) == 1 and fake.hits == 2  # $4 + $4 in flight: a third $4 could pass $10
    assert client.usage.cost_usd == pytest.approx(8.0)


async def test_a_cached_answer_costs_nothing_under_the_cap(fake, tmp_path):
    cache_dir = tmp_path / "responses"
    async with ApiClient(config(fake.base_url, prices=DOLLAR_A_TOKEN), cache=ResponseCache(cache_dir)) as paid:
        await paid.complete([5, 5, 5])
    async with ApiClient(config(fake.base_url, prices=DOLLAR_A_TOKEN, max_cost=0.0), cache=ResponseCache(cache_dir)) as c:
        assert (await c.complete([5, 5, 5]))["cached"] is True
        with pytest.raises(BudgetExceeded):
            await c.complete([6, 6, 6])
    assert fake.hits == 1
