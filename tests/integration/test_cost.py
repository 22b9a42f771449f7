"""The spending cap (ApiConfig.max_cost): the request that could pass it is never sent; what was
paid stays cached."""

from __future__ import annotations

import asyncio

import pytest

from blackbox_mia.backends.api.http.client import ApiClient, BudgetExceeded
from blackbox_mia.cost.prices import request_cost
from blackbox_mia.cost.usage import Budget
from blackbox_mia.backends.api.http.cache.responses import ResponseCache
from blackbox_mia.types import BlackboxMIAError

from ..helpers_client import MODEL, config

DOLLAR_A_TOKEN = {MODEL: (1e6, 1e6)}  # USD per 1M prompt / completion tokens: $1 a token


def test_request_cost_and_budget_reservations():
    assert request_cost(3, 1, (2.0, 8.0)) == pytest.approx(14e-6) and request_cost(3, 1, None) == 0.0
    budget = Budget(10.0)
    budget.reserve(spent=4.0, cost=4.0)  # 4 + 0 + 4 <= 10
    with pytest.raises(BudgetExceeded, match=r"max_cost= \$10.*\$4.0000 spent, \$4.0000 in flight"):
        budget.reserve(spent=4.0, cost=4.0)  # 4 + 4 in flight + 4 > 10
    budget.settle(4.0)
    budget.reserve(spent=6.0, cost=4.0)  # exactly at the cap is allowed
    assert budget.reserved == 4.0


def test_a_request_cap_counts_requests_sent_and_zero_allows_cached_answers_only():
    budget = Budget(None, max_requests=3)
    budget.reserve(spent=0.0, cost=0.0, sent=2)  # the third request
    with pytest.raises(BudgetExceeded, match=r"past max_requests= 3: 3 requests sent .*higher max_requests= to"):
        budget.reserve(spent=0.0, cost=0.0, sent=3)
    for cap, match in ((Budget(0.0), r"^max_cost= \$0 allows cached answers only"),
                       (Budget(None, 0), r"^max_requests= 0 allows cached answers only")):
        with pytest.raises(BudgetExceeded, match=match) as refused:
            cap.reserve(spent=0.0, cost=3e-6, sent=0)
        assert "spent" not in str(refused.value)  # no "$0.0000 spent ... up to $0.0000" against a $0 cap
    below_a_cent = r"\$0\.0000030 spent, \$0\.0000 in flight, this request up to \$0\.0000050"
    with pytest.raises(BudgetExceeded, match=below_a_cent):  # two significant digits, never "$0.0000"
        Budget(5e-6).reserve(spent=3e-6, cost=5e-6)


async def test_max_requests_stops_before_the_request_past_it_and_a_rerun_resumes(make_client, fake):
    client = make_client(max_requests=2)  # an unpriced model: the cap is in requests
    await client.complete([1, 1, 1])
    await client.complete([2, 2, 2])
    with pytest.raises(BudgetExceeded, match="past max_requests= 2: 2 requests sent"):
        await client.complete([3, 3, 3])
    assert fake.hits == 2 and client.usage.requests == 2
    rerun = make_client(max_requests=1)  # the paid answers come from the cache, free
    for i in (1, 2, 3):
        await rerun.complete([i, i, i])
    assert fake.hits == 3 and rerun.usage.requests == 1 and rerun.usage.cache_hits == 2


def test_max_requests_needs_a_sane_value():
    with pytest.raises(BlackboxMIAError, match="max_requests= must be"):
        config("http://127.0.0.1:9/v1", max_requests=-1)


def test_max_cost_needs_a_price_and_a_sane_value(fake):
    with pytest.raises(BlackboxMIAError, match="needs the price of model 'fake-model'") as unpriced:
        config("http://127.0.0.1:9/v1", max_cost=1.0)
    assert "api:MODEL@URL?price=PROMPT,COMPLETION" in str(unpriced.value) and "max_requests= N" in str(unpriced.value)
    with pytest.raises(BlackboxMIAError, match="max_cost= must be"):
        config("http://127.0.0.1:9/v1", max_cost=-1.0, prices=DOLLAR_A_TOKEN)
    assert "max_cost" not in config("http://127.0.0.1:9/v1", max_cost=1.0, prices=DOLLAR_A_TOKEN).describe()


async def test_stops_before_the_request_that_would_pass_the_cap(make_client, fake, tmp_path):
    # each request: prompt [i, i, i] (3 tokens) + max_tokens 1 -> worst case $4, billed $4
    client = make_client(prices=DOLLAR_A_TOKEN, max_cost=10.0)
    await client.complete([1, 1, 1])
    await client.complete([2, 2, 2])
    with pytest.raises(BudgetExceeded, match=r"\$8.0000 spent.*rerun with a higher max_cost="):
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


# -- through the emulator: --dry-run against the real bill, the cap in a black-box scoring run -----

PRICED = "gpt-4o-mini"  # the emulator serves the tiny model under a name the price table knows


def _score(url, model_dir, cache, *extra):
    from typer.testing import CliRunner

    from blackbox_mia.cli import app

    args = ["score", "gsm8k", "--limit", "6", "--scorers", "loss,lowercase", "--base-url", url, "--model", PRICED,
            "--tokenizer", str(model_dir), "--strategy", "forced", "--context-tokens", "64", "--cache-dir", str(cache), "--json", *extra]
    result = CliRunner().invoke(app, [str(a) for a in args], env={"OPENAI_API_KEY": "none"})
    return result


def test_dry_run_predicts_the_bill_of_forced_read_out_exactly(tiny_model_dir, tmp_path):
    import json

    from blackbox_mia.emulator import ServerConfig, serve_in_background

    with serve_in_background(ServerConfig(str(tiny_model_dir), served_name=PRICED, echo=False)) as url:
        dry = _score(url, tiny_model_dir, tmp_path / "cache", "--dry-run")
        assert dry.exit_code == 0, dry.output
        estimate = json.loads(dry.stdout.strip().splitlines()[-1])["estimate"]["total"]["all"]
        assert not (tmp_path / "out.jsonl").exists()
        real = _score(url, tiny_model_dir, tmp_path / "cache", "--out", tmp_path / "out.jsonl")
        assert real.exit_code == 0, real.output
    usage = json.loads(real.stdout.strip().splitlines()[-1])["usage"]["total"]
    assert estimate["strategy"] == "forced" and estimate["relative_uncertainty"] == 0.0
    # texts and their lowercased forms, one request per token, the prefix billed: exact, except
    # that a request asked twice in the run (the same prefix and target) is paid once
    assert usage["requests"] + usage["cache_hits"] == estimate["requests"]
    assert 0.9 * estimate["requests"] <= usage["requests"] <= estimate["requests"]
    assert 0.9 * estimate["prompt_tokens"] <= usage["prompt_tokens"] <= estimate["prompt_tokens"]
    assert usage["completion_tokens"] == usage["requests"]
    assert 0.9 * estimate["usd"] <= usage["cost_usd"] <= estimate["usd"] and usage["cost_usd"] > 0
    assert "usage: " in real.output and "$" in real.output


def test_max_cost_stops_a_black_box_run_and_a_higher_cap_resumes_it(tiny_model_dir, tmp_path):
    from blackbox_mia.backends.api import ApiBackend
    from blackbox_mia.backends.api.http.client import ApiConfig
    from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
    from blackbox_mia.emulator import ServerConfig, serve_in_background

    texts = ["Tom has 3 red apples and 4 green ones.", "Mary buys 12 eggs for 2 dollars each."]
    prices = {PRICED: (1e6, 1e6)}  # $1 a token: the first text's forced read-out costs more than $40
    with serve_in_background(ServerConfig(str(tiny_model_dir), served_name=PRICED, echo=False)) as url:
        def backend(cap):
            api = ApiConfig(base_url=url, model=PRICED, api_key="none", prices=prices, max_cost=cap, concurrency=1)
            return ApiBackend(api, str(tiny_model_dir), TrackerConfig(strategy="forced"), tmp_path)

        with backend(None) as free:
            free.probe()  # the capability probe, cached (not under the cap)
        with backend(40.0) as capped:
            with pytest.raises(BudgetExceeded, match=r"max_cost= \$40"):
                capped.logprobs(texts)
            paid = capped.usage.requests
            assert 0 < paid and capped.usage.cost_usd <= 40.0
        with backend(1e9) as resumed:
            resumed.logprobs(texts)
            assert resumed.usage.cache_hits >= paid  # what the capped run paid came from the cache
