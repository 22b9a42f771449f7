"""Smaller things a new user meets (issue 51, item 9): ``bbmia --version``, ..."""

from __future__ import annotations

import re

from blackbox_mia import __version__
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
