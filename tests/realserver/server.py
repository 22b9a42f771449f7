"""Serve a GPT-2 model directory with a real llama.cpp server (llama-cpp-python 0.3.36).

The server lives in its own venv (never the product's): `BBMIA_LLAMA_PYTHON` names its
python, else `<repo>/.venv-llama/bin/python` (what `.ci/run` makes). That python needs
`llama_cpp.server` (llama-cpp-python with the `[server]` extra), `gguf`, `safetensors` and
`numpy`; the conversion to GGUF (:mod:`tests.realserver.gguf_writer`) runs there too.

From a script (e.g. a canary)::

    from tests.realserver.server import serve_model_dir
    with serve_model_dir("cache/canary/<hash>/model") as server:
        print(server.url, server.model)   # http://127.0.0.1:PORT/v1, the alias

Known behaviours (docs/blackbox.md, "llama.cpp"): llama.cpp rounds the context up to 256
tokens, so for a model of fewer positions the server accepts prompts it cannot evaluate and
the process aborts (GGML_ASSERT in get_rows) when a request runs past `n_positions`: a prompt
longer than that, or a generation that ignores `max_tokens` while its bytes end inside a
UTF-8 character. :meth:`LlamaServer.alive` tells; :meth:`LlamaServer.restart` recovers.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).resolve().with_name("gguf_writer.py")
REFERENCE = Path(__file__).resolve().with_name("llama_reference.py")
REFERENCE_CTX = 2048  # tokens llama.cpp's reference evaluation holds (a whole test text in one batch)
LLAMA_VERSION = "0.3.36"
WHEEL_NAME = f"llama_cpp_python-{LLAMA_VERSION}-py3-none-linux_x86_64.whl"
INSTALL_HINT = (
    "no Python with llama-cpp-python found: set BBMIA_LLAMA_PYTHON to one, or make "
    f"{REPO / '.venv-llama'} with `bash .ci/run` (or by hand: python3 -m venv .venv-llama && "
    f'.venv-llama/bin/pip install "<{WHEEL_NAME}>[server]" gguf safetensors numpy; without '
    f'the wheel: CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv-llama/bin/pip install '
    f'"llama-cpp-python[server]=={LLAMA_VERSION}" gguf safetensors numpy, ~17 min on 2 cores)'
)
_NEEDS = "import llama_cpp, llama_cpp.server.app, gguf, safetensors, numpy; print(llama_cpp.__version__)"
# uvicorn's access log: `INFO:     127.0.0.1:56416 - "POST /v1/completions HTTP/1.1" 200 OK`
_ACCESS = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d{3})')


def find_server_python(env_var: str, venv: str, needs: str, label: str, hint: str,
                       timeout_s: float = 120.0) -> tuple[str | None, str]:
    """(the first python that runs `needs`, None if none) and which one (with `label` and what
    `needs` printed) / why not (`hint` and each candidate's problem). Candidates: `$env_var`,
    then `<repo>/<venv>/bin/python`."""
    env = os.environ.get(env_var)
    candidates = [env] if env else []
    candidates.append(str(REPO / venv / "bin" / "python"))
    problems = []
    for python in candidates:
        if not Path(python).exists():
            problems.append(f"{python}: absent")
            continue
        r = subprocess.run([python, "-c", needs], capture_output=True, text=True, timeout=timeout_s)
        if r.returncode == 0:
            return python, f"{python} ({label} {(r.stdout.strip().splitlines() or ['?'])[-1]})"
        problems.append(f"{python}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return None, hint + " [" + "; ".join(problems) + "]"


def find_llama_python() -> tuple[str | None, str]:
    """(python with llama_cpp + gguf, None if none) and why not / which one."""
    return find_server_python("BBMIA_LLAMA_PYTHON", ".venv-llama", _NEEDS, "llama-cpp-python", INSTALL_HINT)


def convert_to_gguf(model_dir: str | Path, out: str | Path, python: str) -> Path:
    """Write `model_dir` (a HF GPT-2 directory) as an f32 GGUF at `out`, in `python`'s venv."""
    out = Path(out)
    r = subprocess.run([python, str(WRITER), str(model_dir), str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"GGUF conversion of {model_dir} failed:\n{r.stderr[-3000:]}")
    return out


def llama_reference(python: str, gguf: str | Path, request: dict) -> dict:
    """llama.cpp's full-sequence evaluation of `gguf` (:mod:`tests.realserver.llama_reference`,
    run in `python`'s venv): `request` and the answer as that module says."""
    r = subprocess.run([python, str(REFERENCE), str(gguf), str(REFERENCE_CTX)], input=json.dumps(request),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"llama.cpp reference of {gguf} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


def n_positions(model_dir: str | Path) -> int:
    return int(json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))["n_positions"])


def _die_with_parent() -> None:
    """In the child (Linux): SIGTERM when the process that started it exits, however it exits
    (atexit does not run when the tests are killed)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """A `python -m llama_cpp.server` process serving one GGUF under an alias.

    Attributes: `url` (base URL ending in /v1), `model` (the alias), `n_ctx`, `log_path`,
    `process`. Requests are counted from the server's access log, one line each. Subclasses
    (:class:`~tests.realserver.vllm_server.VllmServer`) change `command`, `label` and
    `start_timeout_s`.
    """

    label = "llama.cpp server"  # how errors name the process

    def __init__(self, gguf: str | Path, python: str, *, model: str, n_ctx: int, log_path: str | Path,
                 host: str = "127.0.0.1", port: int | None = None, extra_args: tuple[str, ...] = (),
                 start_timeout_s: float = 120.0):  # fmt: skip
        self.gguf, self.python, self.model, self.n_ctx = Path(gguf), python, model, n_ctx
        self.log_path, self.host, self.fixed_port = Path(log_path), host, port
        self.extra_args, self.start_timeout_s = tuple(extra_args), start_timeout_s
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        self.restarts = 0
        self._log = None
        self._reset_counts()
        atexit.register(self.stop)  # no server outlives its python, whatever happens to the tests

    # -- process ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def command(self) -> list[str]:
        return [
            self.python, "-m", "llama_cpp.server", "--model", str(self.gguf), "--host", self.host,
            "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--model_alias", self.model,
            *self.extra_args,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        """The server process's environment: ours, unbuffered (the access log reaches the file at once)."""
        return dict(os.environ, PYTHONUNBUFFERED="1")

    def start(self) -> "LlamaServer":
        if self.alive():
            return self
        self.port = self.fixed_port or free_port()
        self._reset_counts()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._log.write(f"\n==== start: {shlex.join(self.command)}\n".encode())
        self._log.flush()
        self._offset = self.log_path.stat().st_size
        self.process = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT, env=self.environment(),
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=_die_with_parent if sys.platform == "linux" else None)  # fmt: skip
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.label} exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=2) as r:
                    if r.status == 200:
                        self._skip_startup_polls()
                        return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.label} not up in {self.start_timeout_s} s:\n{self.log_tail()}")

    def alive(self) -> bool:
        """The process still runs (it aborts when a request runs past the model's positions)."""
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGINT (uvicorn's clean shutdown), then SIGKILL; the exit status (None if never run)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.process.returncode

    def restart(self) -> "LlamaServer":
        """A fresh process (a new port; the counts start again from 0)."""
        self.stop()
        self.restarts += 1
        return self.start()

    def ensure_alive(self) -> "LlamaServer":
        return self if self.alive() else self.restart()

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the access log --------------------------------------------------------------------------

    def _reset_counts(self) -> None:
        self._offset = 0
        self._pending = b""
        self._lines: list[tuple[str, str, int]] = []  # (method, path, status) since start
        self._startup = 0

    def _scan(self) -> list[tuple[str, str, int]]:
        """Parse the log lines added since the last call; all (method, path, status) since start."""
        if self.log_path.exists():
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
            self._offset += len(chunk)
            data = self._pending + chunk
            *complete, self._pending = data.split(b"\n")
            for raw in complete:
                m = _ACCESS.search(raw.decode("utf-8", errors="replace"))
                if m:
                    self._lines.append((m.group(1), m.group(2), int(m.group(3))))
        return self._lines

    def _skip_startup_polls(self) -> None:
        """The readiness polls of /v1/models are not the caller's requests (uvicorn logs a line
        before it sends the answer, so the last one is in the file already; wait briefly anyway)."""
        deadline = time.monotonic() + 2.0
        while not any(p.startswith("/v1/models") for _, p, _ in self._scan()) and time.monotonic() < deadline:
            time.sleep(0.01)
        self._startup = len(self._lines)

    def _answered(self):
        return self._scan()[self._startup:]

    def requests(self, path: str | None = None) -> int:
        """Requests answered since start (not counting the start-up polls of /v1/models), all or
        those whose path starts with `path` (e.g. "/v1/completions")."""
        return sum(1 for _, p, _ in self._answered() if path is None or p.startswith(path))

    def statuses(self, path: str | None = None) -> dict[int, int]:
        out: dict[int, int] = {}
        for _, p, s in self._answered():
            if path is None or p.startswith(path):
                out[s] = out.get(s, 0) + 1
        return out

    def server_errors(self) -> int:
        """Answers with a 5xx status since start (an aborted process answers nothing: see alive())."""
        return sum(1 for _, _, s in self._answered() if s >= 500)

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def __repr__(self) -> str:
        return f"LlamaServer({self.model!r} at {self.url}, alive={self.alive()})"


@contextmanager
def serve_model_dir(model_dir: str | Path, *, model: str | None = None, workdir: str | Path | None = None,
                    python: str | None = None, port: int | None = None,
                    extra_args: tuple[str, ...] = ()) -> Iterator[LlamaServer]:  # fmt: skip
    """Convert a HF GPT-2 directory (a canary's, a test model's) to GGUF and serve it with
    n_ctx = n_positions; the GGUF and the log go to `workdir` (default: a temporary directory)."""
    import tempfile

    if python is None:
        python, why = find_llama_python()
        if python is None:
            raise RuntimeError(why)
    model_dir = Path(model_dir)
    with tempfile.TemporaryDirectory(prefix="bbmia-llama-") as tmp:
        work = Path(workdir) if workdir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        gguf = convert_to_gguf(model_dir, work / "model-f32.gguf", python)
        server = LlamaServer(gguf, python, model=model or model_dir.name, n_ctx=n_positions(model_dir),
                             log_path=work / "server.log", port=port, extra_args=extra_args)  # fmt: skip
        with server:
            yield server


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.realserver.server MODEL_DIR [--model NAME] [--port P] [--workdir D]`:
    serve until Ctrl-C."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("model_dir")
    p.add_argument("--model")
    p.add_argument("--port", type=int)
    p.add_argument("--workdir")
    a = p.parse_args(argv)
    with serve_model_dir(a.model_dir, model=a.model, port=a.port, workdir=a.workdir) as server:
        return serve_until_interrupted(server)


def serve_until_interrupted(server) -> int:
    """Print a started server's URL, model and log; wait until it dies or Ctrl-C; print whether
    it is alive and its request and 5xx counts. Returns 0 (a ``main``'s exit status)."""
    print(f"{server.url} model={server.model} log={server.log_path}", flush=True)
    try:
        while server.alive():
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    print(f"alive={server.alive()} requests={server.requests()} 5xx={server.server_errors()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
