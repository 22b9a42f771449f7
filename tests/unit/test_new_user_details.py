"""Smaller things a new user meets (issue 51, item 9): ``bbmia --version``, ..."""

from __future__ import annotations

import re

import pytest

from blackbox_mia import __version__
from blackbox_mia.types import BlackboxMIAError
from tests.tools.doc_commands import ROOT

from .test_cli import invoke


def test_version_prints_the_packages_version_and_exits_0():
    result = invoke("--version")
    assert result.exit_code == 0 and result.output == f"bbmia {__version__}\n"
    declared = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    assert __version__ == declared


def test_loading_a_local_model_through_the_python_api_prints_no_loading_bar(tiny_model_dir, capfd):
    from transformers.utils import logging as hf_logging

    from blackbox_mia.backends.local import LocalBackend, LocalConfig

    hf_logging.enable_progress_bar()  # as in a fresh Python session (the CLI's settings may have run before)
    capfd.readouterr()
    with LocalBackend(LocalConfig(str(tiny_model_dir))) as local:
        assert local.context == 64
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # the library's setting is the caller's again


def test_messages_name_json_types_not_python_ones(tmp_path):
    from blackbox_mia.io import json_type

    assert [json_type(v) for v in (None, True, 3, 2.5, "x", [1], {"a": 1})] == [
        "null", "a boolean", "a number", "a number", "a string", "an array", "an object"]
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "text": null}\n')
    result = invoke("score", items, "--local", "/nonexistent/model", "--cache-dir", tmp_path)
    assert result.exit_code == 2 and "items.jsonl:1: text must be a string, got null" in result.output
    assert "NoneType" not in result.output


def test_the_ref_scorer_without_ref_names_the_option(tmp_path, tiny_model_dir):
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "text": "Tom has 3 apples."}\n')
    result = invoke("score", items, "--local", tiny_model_dir, "--scorers", "ref", "--out", tmp_path / "s.jsonl")
    assert result.exit_code == 2 and "error: scorer 'ref' needs a reference model: pass one as --ref" in result.output
    assert "backends[" not in result.output


@pytest.mark.parametrize("made", [True, False])
def test_a_read_only_empty_cache_names_the_folder_to_make_writable(tmp_path, monkeypatch, made):
    """Issue 51: a cache directory that does not exist under a read-only root was the folder the
    message said to make writable."""
    import sqlite3

    from blackbox_mia.backends.api.http.cache.responses import ResponseCache

    def read_only_file_system(*args, **kwargs):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr("blackbox_mia.backends.api.http.cache.responses.open_store", read_only_file_system)
    directory = tmp_path / "root" / "responses"
    directory.mkdir(parents=True) if made else directory.parent.mkdir()
    with pytest.raises(BlackboxMIAError) as caught:
        ResponseCache(directory)
    message = str(caught.value)
    assert f"the response cache {directory} holds no cache yet (cache.db is absent)" in message
    if made:
        assert "the directory is read-only" in message and message.endswith(f"make {directory} writable")
    else:
        assert f"it does not exist and {directory.parent} is read-only" in message
        assert message.endswith(f"make {directory.parent} writable")


def test_resuming_an_out_of_another_data_set_is_refused_before_the_model_loads(tiny_model_dir, tmp_path):
    first, second, out = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "scores.jsonl"
    first.write_text('{"id": "a", "text": "Tom has 3 apples."}\n')
    second.write_text('{"id": "b", "text": "Ann has 5 pears."}\n')
    assert invoke("score", first, "--local", tiny_model_dir, "--scorers", "loss", "--out", out).exit_code == 0
    # a model that does not exist: were it loaded first, the error would be that it cannot be
    result = invoke("score", second, "--local", "/nonexistent/model", "--scorers", "loss", "--out", out)
    assert result.exit_code == 2 and f"{out} was written with another configuration (dataset." in result.output
    assert "--overwrite" in result.output and "nonexistent" not in result.output
    again = invoke("score", first, "--local", "/nonexistent/model", "--scorers", "loss", "--out", out)
    assert again.exit_code == 2 and "/nonexistent/model" in again.output  # same data set: no early refusal


def _last_json_line(stdout: str) -> dict:
    import json

    return json.loads(stdout.strip().splitlines()[-1])


def test_with_json_a_refused_run_still_ends_stdout_with_one_json_line(tiny_model_dir, tmp_path, monkeypatch):
    from blackbox_mia.emulator import ServerConfig, serve_in_background
    from blackbox_mia.spend import guard

    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "text": "Tom has 3 apples."}\n{"id": "b", "text": "Ann has 5 pears."}\n')
    bad = invoke("score", items, "--local", "/nonexistent/model", "--json")
    assert bad.exit_code == 2 and _last_json_line(bad.stdout) == {
        "error": "local model path '/nonexistent/model' does not exist", "exit_code": 2}
    monkeypatch.setattr(guard, "GUARD_REQUESTS", 0)  # any run is a big one
    with serve_in_background(ServerConfig(str(tiny_model_dir), echo=False)) as url:
        refused = invoke("score", items, "--base-url", url, "--model", tiny_model_dir, "--tokenizer", tiny_model_dir,
                         "--scorers", "loss", "--out", tmp_path / "s.jsonl", "--cache-dir", tmp_path / "cache", "--json")
    line = _last_json_line(refused.stdout)
    assert refused.exit_code == 2 and line["exit_code"] == 2 and line["error"].startswith("refusing to start")
    assert len(refused.stdout.strip().splitlines()) == 1


def test_with_json_an_interrupted_run_still_ends_stdout_with_one_json_line(tiny_model_dir, tmp_path, monkeypatch):
    from blackbox_mia import runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "score_items", interrupted)
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "text": "Tom has 3 apples."}\n')
    result = invoke("score", items, "--local", tiny_model_dir, "--out", tmp_path / "s.jsonl", "--json")
    assert result.exit_code == 130 and _last_json_line(result.stdout) == {
        "error": "interrupted: finished work is saved; rerun the same command to resume", "exit_code": 130}
    plain = invoke("score", items, "--local", tiny_model_dir, "--out", tmp_path / "s.jsonl")
    assert plain.exit_code == 130 and plain.stdout == ""  # without --json, nothing on stdout


def test_one_rule_tells_a_path_from_a_hub_name_for_models_and_tokenizers(tmp_path):
    from blackbox_mia.hub import check_model_path, is_path
    from blackbox_mia.tokenizers.hf import check_tokenizer_path

    assert [is_path(n) for n in ("gpt2", "org/name", "./m", ".m", "~/m", "a/b/c", "C:\\m", "dir/")] == \
        [False, False, True, True, True, True, True, True]
    missing = str(tmp_path / "absent") + "/"
    with pytest.raises(BlackboxMIAError, match="local model path .* does not exist"):
        check_model_path(missing)
    with pytest.raises(BlackboxMIAError, match="no such directory or file"):
        check_tokenizer_path(missing)
    check_model_path("org/name")  # a hub name is left to the hub
    check_tokenizer_path(str(tmp_path))  # an existing directory passes
