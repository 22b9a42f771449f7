"""What a run spent is printed (one ``usage: ...`` line on stderr) also when it stops on an error
(Ctrl-C: ``test_client_pipeline``), not only when it ends well; a run that never reached the
server prints none."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from blackbox_mia.cli import app

from .test_dry_run import bbmia, files, proxy  # noqa: F401  (fixtures)

USAGE = re.compile(r"usage: (\d+) requests \(\d+ from the cache\), ([\d,]+) prompt \+ ([\d,]+) completion tokens")


def test_an_audit_that_fails_after_scoring_prints_what_it_spent(proxy, tiny_model_dir, files, tmp_path):  # noqa: F811
    # every benchmark item is also a calibration item: the sweep scores them, then has none left to sweep
    result, sent = bbmia(proxy, tiny_model_dir, tmp_path / "cache", "sweep", files["labelled"], "--calibration",
                         files["labelled"], "--no-control", "--out", tmp_path / "sweep")
    assert result.exit_code == 2 and "error: no item of" in result.output, result.output
    spent = USAGE.search(result.output)
    assert spent is not None, result.output
    assert int(spent[1]) == sent > 0  # the capability probe and the scoring, as the server counted them
    assert result.output.index("usage: ") < result.output.index("error: ")

    # a run that never reached the server spent nothing: no usage line beside its error
    never = CliRunner().invoke(app, ["score", str(files["labelled"]), "--base-url", "http://127.0.0.1:9/v1",
                                     "--model", str(tiny_model_dir), "--tokenizer", str(tiny_model_dir),
                                     "--cache-dir", str(tmp_path / "cache-9")],
                               env={"OPENAI_BASE_URL": None, "OPENAI_API_KEY": "none"})
    assert never.exit_code == 2 and "127.0.0.1:9" in never.output, never.output  # the connection refused
    assert "usage: " not in never.output
