"""Resuming story completion (:mod:`blackbox_mia.audits.completion`): a damaged completions file is
one clear error naming the file and line, never a crash."""

import json

import pytest

from blackbox_mia.audits.completion import _open
from blackbox_mia.results_file import OVERWRITE_HINT, config_path_for
from blackbox_mia.types import BlackboxMIAError


def test_resume_keeps_rows_and_refuses_a_malformed_one(tmp_path):
    path = tmp_path / "completions.jsonl"
    config = {"samples": 2}
    assert _open(path, config, resume=True) == {}  # a new file and its saved configuration
    assert json.loads(config_path_for(path).read_text()) == config
    row = {"id": "a", "sample": 1, "generation": "x", "rouge_l_recall": 0.5, "approximate": 0.25}
    path.write_text(json.dumps(row) + "\n")
    assert _open(path, config, resume=True) == {("a", 1): row}
    path.write_text(json.dumps(row) + "\n" + json.dumps({"sample": 2}) + "\n")  # no id
    with pytest.raises(BlackboxMIAError) as err:
        _open(path, config, resume=True)
    message = str(err.value)  # the hint's option names are rendered for the caller (--out / out_dir=)
    assert message.startswith(f"{path}:2: malformed completion row; choose another ")
    assert message.endswith(OVERWRITE_HINT[OVERWRITE_HINT.index(" to replace them"):])
