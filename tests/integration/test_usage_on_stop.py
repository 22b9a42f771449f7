"""What a run spent is printed (one ``usage: ...`` line on stderr) also when it stops on an error
or on Ctrl-C, not only when it ends well; a run that never reached the server prints none."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from blackbox_mia.cli import app
from blackbox_mia.emulator import ServerConfig, serve_in_background

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


def test_ctrl_c_prints_what_the_run_spent(tiny_model_dir, tmp_path):
    bbmia = str(Path(sys.executable).with_name("bbmia"))
    with serve_in_background(ServerConfig(str(tiny_model_dir), echo=False)) as url:
        cmd = [bbmia, "score", "gsm8k", "--limit", "30", "--scorers", "loss", "--base-url", url, "--model",
               str(tiny_model_dir), "--tokenizer", str(tiny_model_dir), "--strategy", "forced", "--concurrency", "16",
               "--context-tokens", "64", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "s.jsonl"),
               "--yes"]
        env = {**os.environ, "OPENAI_API_KEY": "none", "OMP_NUM_THREADS": "1"}
        process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 120
        responses = tmp_path / "cache" / "responses" / "cache.db"
        while time.monotonic() < deadline and process.poll() is None and not (
            responses.exists() and responses.stat().st_size > 32_000  # answers of the scoring are being cached
        ):
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    text = err.decode()
    assert process.returncode == 130, text[-2000:]
    spent = USAGE.search(text)
    assert spent is not None and int(spent[1]) > 0 and int(spent[2].replace(",", "")) > 0, text[-2000:]
    assert text.index("usage: ") < text.index("interrupted: finished work is saved")
    assert "Traceback" not in text
