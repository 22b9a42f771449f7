"""Null scores are said on the console (issue 51, item 7): a text whose scores come out null
(through an API: an emoji-only text, its tokens known only by bounds) is named in a warning with
how many texts and why, not only in the rows."""

from __future__ import annotations

import json

from blackbox_mia.emulator import ServerConfig, serve_in_background

from .test_cli import invoke


def test_bbmia_score_warns_of_texts_with_null_scores_and_why(tiny_model_dir, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "plain", "text": "Tom has 3 apples and eats one."}) + "\n"
                     + json.dumps({"id": "emoji", "text": "😀🎉🙂"}) + "\n", encoding="utf-8")
    out = tmp_path / "scores.jsonl"
    with serve_in_background(ServerConfig(str(tiny_model_dir), echo=False)) as url:
        result = invoke("score", items, "--base-url", url, "--model", tiny_model_dir, "--tokenizer", tiny_model_dir,
                        "--scorers", "loss,min_k", "--out", out, "--cache-dir", tmp_path / "cache", "--yes")
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert rows["plain"]["scores"]["loss"] is not None and "unscored" not in rows["plain"]
    assert rows["emoji"]["scores"] == {"loss": None, "min_k": None} and set(rows["emoji"]["unscored"]) == {"loss", "min_k"}
    [warning] = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    assert warning.startswith("warning: 1 of 2 texts have null scores (loss, min_k): their tokens are known only by bounds")
    assert f"first: emoji, loss: {rows['emoji']['unscored']['loss']}" in warning
