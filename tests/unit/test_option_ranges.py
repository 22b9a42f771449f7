"""Every numeric setting is checked against its range, and every error names the value given
(issue 27, item 5): scorer parameters, `serve --port`, the base URL's port, a missing tokenizer
path, a JSONL file that is not UTF-8."""

from __future__ import annotations

import json

import pytest

from blackbox_mia.backends.api.http.config import ApiConfig, display_url
from blackbox_mia.emulator import ServerConfig
from blackbox_mia.scorers import parse_scorer, parse_scorers
from blackbox_mia.types import BlackboxMIAError

from .test_cli import assert_one_line_error, invoke


@pytest.mark.parametrize(("spec", "message"), [
    ("pac:n_neighbours=0", "scorer 'pac': n_neighbours must be an integer >= 1, got 0"),
    ("pac:n_neighbours=-2", "scorer 'pac': n_neighbours must be an integer >= 1, got -2"),
    ("pac:swap_frac=0", "scorer 'pac': swap_frac must be a finite number > 0, got 0"),
    ("pac:k1=150", "scorer 'pac': k1 must be a finite number > 0 and <= 100, got 150"),
    ("pac:k2=nan", "scorer 'pac': k2 must be a finite number > 0 and <= 100, got nan"),
    ("min_k:k=0", "scorer 'min_k': k must be a finite number > 0 and <= 100, got 0"),
    ("min_k_pp:k=inf", "scorer 'min_k_pp': k must be a finite number > 0 and <= 100, got inf"),
])
def test_scorer_parameters_out_of_range_are_refused_naming_the_value_given(spec, message):
    with pytest.raises(BlackboxMIAError) as err:
        parse_scorer(spec)
    assert str(err.value) == message


def test_scorer_parameters_in_range_are_kept():
    pac, min_k = parse_scorers("pac:n_neighbours=1,swap_frac=0.05,k1=100,seed=-3;min_k:k=0.5%")
    assert (pac.n_neighbours, pac.swap_frac, pac.k1, pac.seed, min_k.k) == (1, 0.05, 100.0, -3, 0.5)


def test_score_with_zero_neighbours_fails_before_writing_anything(tmp_path):
    items, out = tmp_path / "items.jsonl", tmp_path / "scores.jsonl"
    items.write_text(json.dumps({"id": "a", "text": "Tom has 3 apples."}) + "\n")
    result = invoke("score", items, "--local", tmp_path / "no-model", "--scorers", "pac:n_neighbours=0", "--out", out)
    assert_one_line_error(result, "n_neighbours must be an integer >= 1, got 0")
    assert not out.exists()


@pytest.mark.parametrize(("port", "shown"), [(-1, "got -1"), (65536, "got 65536")])
def test_serve_port_out_of_range_names_the_port_not_the_host(tmp_path, port, shown):
    result = invoke("serve", "--model", tmp_path / "no-model", "--port", port)
    assert_one_line_error(result, "--port must be an integer >= 0 and <= 65535", shown)
    assert "host" not in result.output
    with pytest.raises(BlackboxMIAError, match="max_batch= must be an integer >= 1, got 0"):
        ServerConfig(model="m", max_batch=0)


@pytest.mark.parametrize(("url", "message"), [
    ("http://127.0.0.1:99999/v1", "base URL 'http://127.0.0.1:99999/v1': its port 99999 is not a TCP port (1 to 65535)"),
    ("http://127.0.0.1:0/v1", "base URL 'http://127.0.0.1:0/v1': its port 0 is not a TCP port"),
    ("http://user:secret@[::1]:8x/v1", "base URL 'http://[::1]:8x/v1': its port 8x is not a TCP port"),
    ("ftp://h/v1", "base URL 'ftp://h/v1': it must be http(s)://HOST[:PORT]/PATH"),
])
def test_base_url_errors_keep_the_port_given_and_drop_credentials(url, message):
    with pytest.raises(BlackboxMIAError) as err:
        ApiConfig(base_url=url, model="m")
    assert str(err.value).startswith(message) and "secret" not in str(err.value)
    assert display_url("http://u:p@h:8000/v1/?q=1") == "http://h:8000/v1"


def test_base_url_port_out_of_range_on_the_command_line(tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"text": "x"}) + "\n")
    result = invoke("score", items, "--base-url", "http://127.0.0.1:99999/v1", "--model", "m",
                    "--tokenizer", "cl100k_base")
    assert_one_line_error(result, "http://127.0.0.1:99999/v1", "port 99999 is not a TCP port")


def test_a_missing_tokenizer_path_says_it_does_not_exist(tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"text": "x"}) + "\n")
    missing = tmp_path / "tok"
    result = invoke("score", items, "--base-url", "http://127.0.0.1:8000/v1", "--model", "m", "--tokenizer", missing)
    assert_one_line_error(result, f"cannot load tokenizer '{missing}': no such directory")
    assert "Repo id" not in result.output


def test_a_non_utf8_jsonl_error_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"text": "fine"}\n\n{"text": "caf\xe9"}\n')
    result = invoke("score", path, "--local", tmp_path / "no-model")
    assert_one_line_error(result, f"{path}:3: not UTF-8 (byte 0xe9 at column 14")


@pytest.mark.parametrize(("spec", "k"), [("min_k:k=10", 10.0), ("min_k:k=10%", 10.0), ("min_k:k=0.5%", 0.5),
                                         ("min_k:k=1", 1.0), ("min_k:k=100%", 100.0)])
def test_min_k_takes_a_percent_with_or_without_its_sign(spec, k):
    scorer = parse_scorer(spec)
    assert scorer.k == k
    assert parse_scorer(scorer.label) == scorer  # a label is a spec that parses back


@pytest.mark.parametrize(("spec", "message"), [
    ("min_k:k=0.2", "scorer 'min_k': k=0.2 is ambiguous: k is a percent (0 < k <= 100); write k=20 for 20% of the "
                    "tokens, or k=0.2% for 0.2%"),
    ("pac:k2=0.5", "scorer 'pac': k2=0.5 is ambiguous"),
    ("min_k_pp:k=0.05", "scorer 'min_k_pp': k=0.05 is ambiguous"),
    ("min_k:k=0%", "k must be a finite number > 0 and <= 100, got 0%"),
    ("min_k:k=120%", "k must be a finite number > 0 and <= 100, got 120%"),
])
def test_a_fraction_where_a_percent_is_meant_is_refused_not_guessed(spec, message):
    with pytest.raises(BlackboxMIAError) as err:
        parse_scorer(spec)
    assert message in str(err.value)
