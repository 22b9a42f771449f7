"""Shared fixtures: a tiny random GPT-2 with a BPE tokenizer trained on GSM8K text."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from aiohttp import web

from blackbox_mia.backends.api.http.client import ApiClient
from blackbox_mia.backends.api.http.cache.responses import ResponseCache

from .helpers_client import FakeApi, config
from .realserver.fixtures import _llama_server_session, llama_peaked_gguf, llama_python, llama_server  # noqa: F401
from .realserver.fixtures import _smollm2_server_session, smollm2_gguf, smollm2_reference, smollm2_server  # noqa: F401
from .realserver.fixtures import _vllm_server_session, vllm_model_dir, vllm_python, vllm_server  # noqa: F401


@pytest.fixture(autouse=True)
def _sigint_handler_restored():
    """Every test leaves the process's SIGINT handler as it found it: a command run in-process
    after a Ctrl-C ignores SIGINT from then on (``cli.interrupts.interrupt_once``), and an event
    loop run in the main thread installs its own; a later test that sends SIGINT (the Ctrl-C
    tests of ``LoopThread``) then waited forever."""
    before = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not before:
        signal.signal(signal.SIGINT, before)

DATA = Path(__file__).resolve().parents[1] / "blackbox_mia" / "data"

# members seen 10 times over 3 epochs: a 1-layer model reproduces some of their tokens and their
# loss is well below the non-members'
MEMORIZING_CANARY = {
    "n_background": 60, "n_members": 20, "n_nonmembers": 20, "dup": 10, "vocab_size": 300,
    "n_layer": 1, "n_embd": 32, "n_head": 2, "block_size": 64, "epochs": 3, "batch_size": 8,
}  # fmt: skip


def gsm8k_questions(n: int, split: str = "train") -> list[str]:
    with open(DATA / "gsm8k" / f"{split}.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["question"] for _, line in zip(range(n), f)]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-dim GPT-2 (context 64 tokens, vocab 300) with random weights."""
    from blackbox_mia.canary.model import build_gpt2, save_model_dir, train_tokenizer

    tokenizer = train_tokenizer(gsm8k_questions(300), vocab_size=300)
    model = build_gpt2(len(tokenizer), n_layer=2, n_embd=32, n_head=2, n_positions=64, seed=0)
    return save_model_dir(tmp_path_factory.mktemp("tiny"), model, tokenizer)


@pytest.fixture(scope="session")
def peaked_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny GPT-2 with its (tied) embeddings scaled ×30: peaked next-token distributions in
    which most text tokens lie 10-35 nats below the argmax, far outside the top-5."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from blackbox_mia.canary.model import save_model_dir

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(30.0)
    return save_model_dir(tmp_path_factory.mktemp("peaked"), model, AutoTokenizer.from_pretrained(tiny_model_dir))


# -- ApiClient against the in-test OpenAI-shaped server (tests/unit/test_client*.py) -------------


@pytest.fixture
async def fake():
    server = FakeApi()
    app = web.Application()
    app.router.add_post("/v1/completions", server.handle)
    app.router.add_post("/v1/chat/completions", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    server.base_url = f"http://{host}:{port}/v1"
    yield server
    await runner.cleanup()


@pytest.fixture
async def make_client(fake, tmp_path):
    """Clients of the fake server sharing one cache directory (closed at the end)."""
    clients = []

    def make(**overrides) -> ApiClient:
        client = ApiClient(config(fake.base_url, **overrides), cache=ResponseCache(tmp_path / "responses"))
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
def client(make_client):
    return make_client()


# -- the validation server over the tiny model (tests/unit/test_server*.py) ------------------------


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    from blackbox_mia.backends.local import LocalBackend, LocalConfig

    return LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu"))


@pytest.fixture(scope="module")
def codec(backend):
    from blackbox_mia.tokenizers import HFTokenCodec

    return HFTokenCodec(backend.tokenizer, "tiny")


@pytest.fixture(scope="module")
def name(tiny_model_dir):
    return str(tiny_model_dir)


@pytest.fixture(scope="module")
def raw_url(backend, name):
    from .helpers_server import _serve

    with _serve(backend, name) as url:
        yield url


@pytest.fixture(scope="session")
def memorizing_canary(tmp_path_factory) -> Path:
    """A tiny canary (:data:`MEMORIZING_CANARY`) trained once for the memorization, document
    and unlearning tests (tests must not write into it)."""
    from blackbox_mia.canary import CanaryConfig, train_canary

    config = CanaryConfig(**MEMORIZING_CANARY)
    return train_canary(config, tmp_path_factory.mktemp("canary") / "model", progress=False)
