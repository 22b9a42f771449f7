"""What a new user meets first (issue 40, items 2-8): a refused connection and an unknown model
in one line before the tokenizer loads, files with a BOM or in the wrong format, a directory as
the dataset, an empty option value, an empty read-only cache, a refused key, an HTML page
answered with 200, the dataset list in the help, the default output name, small-sample AUCs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from blackbox_mia.types import BlackboxMIAError

from .test_cli import assert_one_line_error, invoke, labelled_jsonl  # noqa: F401 (a fixture)
from .test_fast_start import ERROR_CPU_S, run_bbmia

REFUSED_URL = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there


# -- item 2: connection errors ------------------------------------------------------------------


def test_a_refused_connection_is_one_line_before_the_tokenizer_loads(tmp_path, tiny_model_dir):
    report, stderr, cpu = run_bbmia("score", "gsm8k", "--base-url", REFUSED_URL, "--model", "m", "--tokenizer",
                                    str(tiny_model_dir), "--limit", "2", "--out", str(tmp_path / "o.jsonl"),
                                    cache_dir=tmp_path / "cache")
    assert report["code"] == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [f"error: connection refused at {REFUSED_URL}: is the server running? "
                     "(nothing listens at that host and port)"], stderr
    assert not {"torch", "transformers"} & set(report["heavy"]), report  # the HF tokenizer was never loaded
    assert cpu <= ERROR_CPU_S, f"a refused connection took {cpu:.2f} s of CPU"


def test_an_unknown_model_is_named_before_the_tokenizer_loads(tmp_path, tiny_model_dir):
    from blackbox_mia.emulator import ServerConfig, serve_in_background

    with serve_in_background(ServerConfig(str(tiny_model_dir), served_name="tiny")) as url:
        report, stderr, cpu = run_bbmia("score", "gsm8k", "--base-url", url, "--model", "wrong", "--tokenizer",
                                        str(tiny_model_dir), "--limit", "2", "--out", str(tmp_path / "o.jsonl"),
                                        cache_dir=tmp_path / "cache")
    assert report["code"] == 2 and stderr.startswith("error: unknown model 'wrong'") and "'tiny'" in stderr, stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert not {"torch", "transformers"} & set(report["heavy"]), report
    assert cpu <= ERROR_CPU_S, f"an unknown model took {cpu:.2f} s of CPU"


def test_a_refused_key_is_named_first(tmp_path, tiny_model_dir):
    from blackbox_mia.emulator import ServerConfig, serve_in_background

    with serve_in_background(ServerConfig(str(tiny_model_dir), api_key="sk-right")) as url:
        result = invoke("score", "gsm8k", "--base-url", url, "--model", tiny_model_dir, "--tokenizer", tiny_model_dir,
                        "--limit", 2, "--out", tmp_path / "o.jsonl", "--cache-dir", tmp_path / "cache",
                        env={"OPENAI_API_KEY": "sk-wrong"})
    assert_one_line_error(result, "error: the API key was refused by", "(HTTP 401")
    assert "log-probs" not in result.output and "sk-wrong" not in result.output


def test_the_probe_stops_on_a_refused_key_instead_of_calling_it_missing_log_probs():
    import asyncio

    from blackbox_mia.backends.api.http.errors import AuthenticationError
    from blackbox_mia.backends.api.probe_checks import attempt

    async def refused():
        raise AuthenticationError(401, "the API key was refused by http://x/v1 (HTTP 401)", "final", None)

    with pytest.raises(AuthenticationError, match="HTTP 401"):
        asyncio.run(attempt(refused()))


def test_a_server_that_never_answered_is_not_said_to_have_stopped(tmp_path, tiny_model_dir):
    import asyncio

    from blackbox_mia.backends.api.endpoint import Endpoint
    from blackbox_mia.backends.api.http.errors import APIConnectionError

    class Down:
        config = type("C", (), {"chat_template": None})()

        async def request(self, *args, **kwargs):
            raise APIConnectionError(None, "connection refused at http://x/v1", "transient", None)

    from blackbox_mia.tokenizers import load_codec

    endpoint = Endpoint(Down(), load_codec(str(tiny_model_dir), "m"), "completions", token_id_prompts=True)
    with pytest.raises(APIConnectionError) as caught:
        asyncio.run(endpoint.next_token([1, 2, 3], 1))
    assert str(caught.value).startswith("connection refused") and "stopped answering" not in str(caught.value)
    assert "cached" not in str(caught.value)


# -- item 4: input files ------------------------------------------------------------------------


def test_a_jsonl_with_a_byte_order_mark_is_read(tmp_path):
    from blackbox_mia.datasets import load_shipped_or_jsonl

    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"text": "first", "label": 1}\n{"text": "second", "label": 0}\n')
    dataset = load_shipped_or_jsonl(str(path))
    assert [(i.text, i.label) for i in dataset.items] == [("first", 1), ("second", 0)]


def test_a_text_file_is_told_what_a_line_must_look_like(tmp_path, tiny_model_dir):
    path = tmp_path / "notes.txt"
    path.write_text("Tom has three apples.\nIvy walks to school.\n")
    result = invoke("score", path, "--local", tiny_model_dir, "--out", tmp_path / "o.jsonl")
    assert_one_line_error(result, f"{path}:1: malformed JSON", 'one JSON object, e.g. {"text": "...", "label": 1}')


def test_a_directory_as_the_dataset_is_said_to_be_one(tmp_path, tiny_model_dir):
    result = invoke("score", tmp_path, "--local", tiny_model_dir, "--out", tmp_path / "o.jsonl")
    assert_one_line_error(result, f"dataset file is a directory, not a data file (a Hugging Face data set on disk: hf:{tmp_path}): {tmp_path}", "canary:PATH")


# -- item 6 and 7: the default output name, the help's dataset list ------------------------------


@pytest.mark.parametrize("name, out", [
    ("gsm8k:test", "runs/score-gsm8k-test.jsonl"),
    ("wikimia64", "runs/score-wikimia64.jsonl"),
    ("/c/canary/ab12/canary_items.jsonl", "runs/score-canary_items.jsonl"),
    ("canary:/c/canary/ab12", "runs/score-canary-ab12.jsonl"),
    ("data/items.jsonl", "runs/score-items.jsonl"),
])
def test_the_default_output_is_named_after_the_dataset_once(name, out):
    from blackbox_mia.cli.score import default_output

    assert default_output(name) == Path(out)


def test_the_printed_next_step_of_canary_train_scores_the_canary_spec():
    source = (Path(__file__).resolve().parents[2] / "blackbox_mia" / "cli" / "canary.py").read_text()
    assert 'f"evaluate: bbmia score canary:{path} --local {path}"' in source


def test_score_help_lists_every_named_dataset():
    from blackbox_mia.datasets import NAMED

    result = invoke("score", "--help", env={"COLUMNS": "400"})
    assert result.exit_code == 0
    for name in ("canary", "canary:PATH", "ja-debian-docs", *NAMED):
        assert name in result.output, name


# -- item 8: empty values, caches, a 200 that is not JSON -----------------------------------------


@pytest.mark.parametrize("args, option", [
    (["score", "gsm8k", "--scorers", ""], "--scorers"),
    (["score", "gsm8k", "--scorers="], "--scorers"),
    (["score", "gsm8k", "--model", "  "], "--model"),
    (["canary", "train", "--out", ""], "--out"),
])
def test_an_empty_option_value_is_refused(args, option):
    result = invoke(*args, "--local", "/nonexistent/model")
    assert_one_line_error(result, f"{option} is empty: give it a value or leave the option out")


@pytest.mark.parametrize("how", ["opened read-only", "a read-only directory"])
def test_an_empty_read_only_cache_is_absent_not_damaged(tmp_path, monkeypatch, how):
    import sqlite3

    from blackbox_mia.backends.api.http.cache.responses import ResponseCache

    def read_only_file_system(*args, **kwargs):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr("blackbox_mia.backends.api.http.cache.responses.open_store", read_only_file_system)
    with pytest.raises(BlackboxMIAError) as caught:
        ResponseCache(tmp_path, read_only=how == "opened read-only")
    message = str(caught.value)
    assert "holds no cache yet (cache.db is absent)" in message and "pass a writable cache_dir" in message
    assert "repair" not in message and "damaged" not in message


def test_an_html_page_answered_with_200_is_not_retried(tmp_path):
    import asyncio

    from aiohttp import web

    from blackbox_mia.backends.api.http.client import ApiClient
    from blackbox_mia.backends.api.http.config import ApiConfig
    from blackbox_mia.backends.api.http.cache.responses import ResponseCache
    from blackbox_mia.backends.api.http.dialect import dialect_named
    from blackbox_mia.backends.api.http.errors import ApiError

    posts = []

    async def page(request):
        posts.append(request.path)
        return web.Response(text="<!doctype html><html><body>Welcome</body></html>", content_type="text/html")

    async def main():
        app = web.Application()
        app.router.add_post("/v1/completions", page)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        config = ApiConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=6, backoff_base_s=0.01)
        try:
            async with ApiClient(config, cache=ResponseCache(tmp_path / "cache")) as client:
                with pytest.raises(ApiError) as caught:
                    await client.request(dialect_named("completions", None), "hello", max_tokens=1, temperature=0.0, top_n=1)
        finally:
            await runner.cleanup()
        return caught.value

    error = asyncio.run(main())
    assert len(posts) == 1, posts  # final: one request, not 7
    assert error.fault == "final" and "answered HTTP 200 with an HTML page, not JSON" in str(error)
    assert "<!doctype html>" not in str(error)  # named, not repeated


# -- item 5: small samples ------------------------------------------------------------------------


def test_three_labelled_texts_get_a_warning_and_no_interval(tiny_model_dir, labelled_jsonl, tmp_path):
    three = tmp_path / "three.jsonl"
    three.write_text("".join(labelled_jsonl.read_text().splitlines(keepends=True)[:3]))  # 2 members, 1 non-member
    result = invoke("score", three, "--local", tiny_model_dir, "--scorers", "loss", "--out", tmp_path / "o.jsonl")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("loss"))
    assert row.split()[2:] == ["[no", "CI:", "2", "+", "1", "texts]"], row  # no zero-width [1.000, 1.000]
    assert ("warning: only 2 members and 1 non-members (fewer than 10 of a class): no confidence interval is given"
            in result.output)


def test_evaluate_scores_gives_no_interval_below_ten_texts_per_class():
    from blackbox_mia.evaluation.metrics import evaluate_scores

    small = evaluate_scores([1, 1, 0], [0.9, 0.8, 0.1], fprs=(0.5,), n_boot=200)
    assert small["auc"] == 1.0 and small["auc_ci"] is None and small["tpr_at_fpr_ci"] == {"0.5": None}
    assert small["small_sample"].startswith("only 2 members and 1 non-members")
    labels = [1] * 10 + [0] * 10
    enough = evaluate_scores(labels, [i + (5 if y else 0) for i, y in enumerate(labels)], fprs=(0.5,), n_boot=200)
    assert "small_sample" not in enough and len(enough["auc_ci"]) == 2 and enough["auc_ci"][0] < enough["auc_ci"][1]


# -- item 7: a resumed run says what it scored ----------------------------------------------------


def test_a_resumed_run_says_how_many_texts_it_scored_and_how_many_in_all(tiny_model_dir, labelled_jsonl, tmp_path):
    out = tmp_path / "o.jsonl"
    base = ("score", labelled_jsonl, "--local", tiny_model_dir, "--scorers", "loss", "--out", out)
    first = invoke(*base, "--limit", 2)
    assert first.exit_code == 0 and "scored 2 texts (" in first.output, first.output
    again = invoke(*base)
    assert again.exit_code == 0, again.output
    assert "scored 2 texts this run, 4 in all (2 resumed from the earlier run)" in again.output, again.output


# -- item 3: progress on a long text ---------------------------------------------------------------


def test_a_long_text_shows_its_windows_and_progress_in_tokens(tiny_model_dir, tmp_path):
    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.text.windows import sliding_windows

    text = "Tom has 3 apples and eats one, then buys five more at the fair. " * 60
    n_tokens = len(LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu")).encode(text)) + 1  # + BOS
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"text": text}) + "\n")
    result = invoke("score", path, "--local", tiny_model_dir, "--scorers", "loss", "--out", tmp_path / "o.jsonl")
    assert result.exit_code == 0, result.output
    windows = len(sliding_windows(n_tokens, 64))
    assert windows > 10
    assert (f"note: text #0 is {n_tokens:,} tokens, longer than the context (64): scored in {windows:,} sliding "
            "windows") in result.output
    assert "forward" in result.output and f"/{n_tokens} [" in result.output  # a bar in tokens, not 0/1 texts
