"""End to end under injected faults: the black-box path through the fault proxy in front of
``bbmia serve`` on the tiny model gives the clean run's values and caches no invalid answer; a
``bbmia score`` killed with SIGKILL resumes without paying again for any answer it was given;
two processes sharing a cache directory pay for each request once.

The measuring code is that of ``benchmarks/fault_injection.py`` (imported here), so the benchmark
and the tests count the same things."""

from __future__ import annotations

import json
import signal

import pytest

from benchmarks import fault_injection as fi
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.datasets import Item, load_shipped_or_jsonl
from blackbox_mia.emulator import ServerConfig, serve_in_background
from tests.tools.fault_proxy import (
    FAULT_CLASSES,
    FaultConfig,
    proxy_in_background,
)

from ..conftest import gsm8k_questions

TOLERANCE = 1e-6  # nats: the faulty run's values and bounds against the clean run's
RATE = 0.2
N_SCORED = 10  # GSM8K test texts (question + answer) for the `bbmia score` runs
SHORT_TEXTS = gsm8k_questions(5, split="test")  # 5 short texts, some longer than the 64-token context


@pytest.fixture(scope="module")
def model(tiny_model_dir) -> str:
    return str(tiny_model_dir)


@pytest.fixture(scope="module")
def context(model) -> int:
    return LocalBackend(LocalConfig(model, device="cpu")).context


@pytest.fixture(scope="module")
def upstream(model):
    with serve_in_background(ServerConfig(model=model), LocalBackend(LocalConfig(model, device="cpu"))) as url:
        yield url


@pytest.fixture(scope="module")
def clean(upstream, model, context, tmp_path_factory):
    run = fi.run_backend(upstream, model, SHORT_TEXTS, tmp_path_factory.mktemp("clean"), context)
    assert run.error is None and len(run.values) == len(SHORT_TEXTS)
    assert max(len(v.token_ids) for v in run.values.values()) > context  # windows are exercised
    return run


@pytest.fixture(scope="module")
def scored_items() -> list[Item]:
    return load_shipped_or_jsonl("gsm8k").items[:N_SCORED]


@pytest.fixture(scope="module")
def scored_clean_requests(upstream, model, context, scored_items, tmp_path_factory) -> int:
    """Requests a clean run of the scored texts needs (probe included)."""
    run = fi.run_backend(upstream, model, [it.text for it in scored_items], tmp_path_factory.mktemp("sc"), context)
    assert run.error is None
    return run.usage["requests"]


@pytest.mark.parametrize("fault", [*FAULT_CLASSES, "all"])
def test_faults_change_no_value_and_cache_no_invalid_answer(fault, upstream, model, context, clean, tmp_path):
    classes = FAULT_CLASSES if fault == "all" else (fault,)
    config = FaultConfig(upstream=upstream, rate=RATE, classes=classes, seed=0, stall_s=1.0)
    with proxy_in_background(config) as proxy:
        run = fi.run_backend(proxy.base_url, model, SHORT_TEXTS, tmp_path, context, timeout_s=0.5, max_retries=8,
                             backoff_base_s=0.01)
    injected = proxy.stats.injected
    assert run.error is None, run.error
    assert sorted(run.values) == list(range(len(SHORT_TEXTS)))
    values, everything = fi.max_abs_diff(clean.values, run.values)
    assert values <= TOLERANCE and everything <= TOLERANCE
    assert all(run.values[i].strategies == clean.values[i].strategies for i in clean.values)
    rows, problems = fi.invalid_rows(tmp_path)
    assert rows > 0 and not problems, problems
    if fault == "all":
        assert sum(injected.values()) >= 8 and len(injected) >= 4, injected
    else:
        assert injected[fault] >= 2, injected  # the fault really happened, and was survived


def test_kill_9_then_rerun_pays_for_no_delivered_answer_again(upstream, model, context, scored_items,
                                                              scored_clean_requests, tmp_path):
    jsonl = fi.write_jsonl(scored_items, tmp_path / "texts.jsonl")
    out = tmp_path / "scores.jsonl"
    with proxy_in_background(FaultConfig(upstream=upstream, rate=0.0)) as proxy:
        command = fi.score_command(jsonl, proxy.base_url, model, tmp_path / "cache", out, context)
        kill = fi.kill_and_rerun(proxy, command, out, int(0.4 * scored_clean_requests), tmp_path)
    assert kill["killed"] and kill["first_exit"] == -9, kill
    assert kill["delivered_before_kill"] > 0 and kill["rows_before_kill"] < N_SCORED, kill
    assert kill["rerun_exit"] == 0, kill
    assert kill["repaid_after_kill"] == 0, kill
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [it.id for it in scored_items]  # every row, each id once, in order
    assert all(r["n_tokens"] > 0 and r["scores"]["loss"] is not None for r in rows)


def test_ctrl_c_then_rerun_pays_for_no_delivered_answer_again(upstream, model, context, scored_items,
                                                             scored_clean_requests, tmp_path):
    jsonl = fi.write_jsonl(scored_items, tmp_path / "texts.jsonl")
    out = tmp_path / "scores.jsonl"
    with proxy_in_background(FaultConfig(upstream=upstream, rate=0.0)) as proxy:
        command = fi.score_command(jsonl, proxy.base_url, model, tmp_path / "cache", out, context)
        stop = fi.kill_and_rerun(proxy, command, out, int(0.4 * scored_clean_requests), tmp_path,
                                 signum=signal.SIGINT)  # no pause: the command lands its answers in flight itself
    assert stop["killed"] and stop["first_exit"] == 130, stop
    assert stop["delivered_before_kill"] > 0 and stop["rows_before_kill"] < N_SCORED and stop["rerun_exit"] == 0, stop
    assert stop["repaid_after_kill"] == 0, stop
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [it.id for it in scored_items]


def test_identical_500s_in_the_mix_are_retried_in_one_run(upstream, model, context, clean, tmp_path):
    config = FaultConfig(upstream=upstream, rate=RATE, classes=("500", "503", "truncated"), seed=0,
                         same_5xx_body=True)
    with proxy_in_background(config) as proxy:
        run = fi.run_backend(proxy.base_url, model, SHORT_TEXTS, tmp_path, context, max_retries=8,
                             backoff_base_s=0.01)
    assert run.error is None, run.error
    assert sorted(run.values) == list(range(len(SHORT_TEXTS)))  # every text, in this one run
    assert fi.max_abs_diff(clean.values, run.values)[1] <= TOLERANCE
    assert proxy.stats.injected["500"] >= 2, proxy.stats.injected


def test_two_processes_on_one_cache_pay_for_each_request_once(upstream, model, context, scored_items, tmp_path):
    jsonl = fi.write_jsonl(scored_items, tmp_path / "texts.jsonl")
    outs = [tmp_path / f"scores-{i}.jsonl" for i in range(2)]
    with proxy_in_background(FaultConfig(upstream=upstream, rate=0.0)) as proxy:
        commands = [fi.score_command(jsonl, proxy.base_url, model, tmp_path / "shared", o, context) for o in outs]
        two = fi.two_processes(proxy, commands, outs, tmp_path)
    assert two["exits"] == [0, 0], two
    assert two["rows"] == two["unique_ids"] == [N_SCORED, N_SCORED], two
    assert two["paid_twice"] == 0 and two["extra_payments"] == 0, two
    assert two["forwarded_twice"] == two["forwarded_twice_refused"], two  # only refusals (never cached) twice
    first, second = ([json.loads(line) for line in o.read_text().splitlines()] for o in outs)
    assert [r["scores"] for r in first] == [r["scores"] for r in second]
