"""pytest fixtures of a real llama.cpp server over the peaked test model (imported by
tests/conftest.py).

- `llama_python` (session): the python of the llama venv; the test is skipped when there is
  none (`BBMIA_LLAMA_PYTHON`, else `<repo>/.venv-llama/bin/python`), or fails when
  `BBMIA_REQUIRE_LLAMA=1` (as in `.ci/run`).
- `llama_peaked_gguf` (session): `peaked_model_dir` as an f32 GGUF.
- `llama_server` (function): the running :class:`~tests.realserver.server.LlamaServer`
  serving it (one process for the session, restarted before a test if a previous one killed
  it): `.url` (ending in /v1), `.model` (alias "peaked"), `.n_ctx` (64 = n_positions),
  `.requests(path=None)`, `.statuses()`, `.server_errors()`, `.alive()`, `.restart()`,
  `.restarts`, `.log_path`.
"""

from __future__ import annotations

import os

import pytest

from .server import LlamaServer, convert_to_gguf, find_llama_python, n_positions

PEAKED_ALIAS = "peaked"


@pytest.fixture(scope="session")
def llama_python() -> str:
    python, why = find_llama_python()
    if python is None:
        if os.environ.get("BBMIA_REQUIRE_LLAMA") == "1":
            pytest.fail("BBMIA_REQUIRE_LLAMA=1 but " + why, pytrace=False)
        pytest.skip(why)
    return python


@pytest.fixture(scope="session")
def llama_peaked_gguf(llama_python, peaked_model_dir, tmp_path_factory):
    return convert_to_gguf(peaked_model_dir, tmp_path_factory.mktemp("llama") / "peaked-f32.gguf", llama_python)


@pytest.fixture(scope="session")
def _llama_server_session(llama_python, llama_peaked_gguf, peaked_model_dir):
    server = LlamaServer(llama_peaked_gguf, llama_python, model=PEAKED_ALIAS, n_ctx=n_positions(peaked_model_dir),
                         log_path=llama_peaked_gguf.with_name("server.log"))  # fmt: skip
    server.start()
    yield server
    server.stop()


@pytest.fixture
def llama_server(_llama_server_session) -> LlamaServer:
    return _llama_server_session.ensure_alive()
