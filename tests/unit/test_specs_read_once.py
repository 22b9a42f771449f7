"""Specs typed on the command line are read once (issue 44): a sweep's scorer and features are
parsed at the command's edge and handed down as Scorer objects (planning, routing and the
reference feature used to parse the same spec up to five times)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from blackbox_mia.scorers import REGISTRY

from .test_cli import invoke


@pytest.fixture
def constructions(monkeypatch):
    """Scorer name -> how many scorer objects of it were built (every parse builds one)."""
    built: dict[str, int] = {}
    for name in ("min_k", "loss", "zlib"):
        base = REGISTRY[name]

        @dataclass(frozen=True)
        class Counted(base):  # type: ignore[valid-type, misc]
            def __post_init__(self, _name=name):
                built[_name] = built.get(_name, 0) + 1
                getattr(super(), "__post_init__", lambda: None)()

        monkeypatch.setitem(REGISTRY, name, Counted)
    return built


def test_a_sweep_parses_each_scorer_spec_once(tiny_model_dir, tmp_path, constructions):
    result = invoke("sweep", "gsm8k", "--limit", "80", "--scorers", "min_k:k=10", "--features", "loss,zlib",
                    "--local", tiny_model_dir, "--dry-run", "--cache-dir", tmp_path / "cache", "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert constructions == {"min_k": 1, "loss": 1, "zlib": 1}


def test_eval_parses_each_scorer_spec_once(tiny_model_dir, tmp_path, constructions):
    import json

    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": str(i), "text": f"Tom has {i} apples and {i + 2} pears.", "label": i % 2})
                             + "\n" for i in range(8)))
    result = invoke("eval", items, "--scorers", "min_k:k=10,loss", "--local", tiny_model_dir, "--dry-run",
                    "--cache-dir", tmp_path / "cache", "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert constructions == {"min_k": 1, "loss": 1}
