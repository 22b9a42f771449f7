"""Chat-only models: the emulator renders a REAL chat template (the tokenizer's own, ChatML by
default, or a Jinja source) with roles, and the client's message templates (plain, continuation,
a user file) put the prefix into messages; values equal the white-box model on the rendered text."""

from __future__ import annotations

import copy
import json

import pytest

from blackbox_mia.backends.api.http.client import ApiClient, ApiConfig
from blackbox_mia.backends.api.http.dialect import (
    CHAT,
    CONTINUATION,
    CONTINUATION_SYSTEM,
    PLAIN,
    Chat,
    MessageTemplate,
    dialect_named,
    load_message_template,
)
from blackbox_mia.emulator import (
    CHATML_TEMPLATE,
    MODEL_TEMPLATE,
    ServerConfig,
    load_chat_template,
)
from blackbox_mia.emulator.templates import ChatFormatter
from blackbox_mia.types import BlackboxMIAError

from ..conftest import gsm8k_questions
from ..helpers_server import _serve, post, top

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Natalia sold clips"}]
CHATML_TEXT = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nNatalia sold clips<|im_end|>\n"
               "<|im_start|>assistant\n")  # MESSAGES in ChatML, by hand
LLAMA_LIKE = ("{% for m in messages %}{% if m['role'] == 'system' %}<<SYS>>{{ m['content'] }}<</SYS>>"
              "{% else %}[INST]{{ m['content'] }}[/INST]{% endif %}{% endfor %}")


@pytest.fixture(scope="module")
def long_backend(tmp_path_factory):
    """The tiny model's tokenizer under a 2-layer model with a 512-token context: room for ChatML
    around a prefix (the 300-token vocabulary spells every markup character out)."""
    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.canary.model import build_gpt2, save_model_dir, train_tokenizer

    tokenizer = train_tokenizer(gsm8k_questions(300), vocab_size=300)
    model = build_gpt2(len(tokenizer), n_layer=2, n_embd=32, n_head=2, n_positions=512, seed=1)
    path = save_model_dir(tmp_path_factory.mktemp("long"), model, tokenizer)
    return LocalBackend(LocalConfig(str(path), device="cpu"))


# -- the emulator's chat templates ---------------------------------------------------------------


def test_model_template_defaults_to_chatml_with_roles(long_backend):
    backend, name = long_backend, "long"
    assert backend.tokenizer.chat_template is None  # so "model" falls back to ChatML
    row = backend.next_token_logprobs([backend.encode(CHATML_TEXT)])[0]
    with _serve(backend, name, chat_template=MODEL_TEMPLATE) as url:
        status, body = post(url, "/chat/completions", {"model": name, "messages": MESSAGES, "max_tokens": 1,
                                                       "temperature": 0, "logprobs": True, "top_logprobs": 5})
        _, tokenized = post(url.removesuffix("/v1"), "/tokenize", {"model": name, "messages": MESSAGES})
    assert status == 200 and body["usage"]["prompt_tokens"] == len(backend.encode(CHATML_TEXT))
    entry = body["choices"][0]["logprobs"]["content"][0]
    assert [t["token"] for t in entry["top_logprobs"]] == [backend.codec.token_string(i) for i in top(row, 5)]
    assert [t["logprob"] for t in entry["top_logprobs"]] == pytest.approx(sorted(row)[::-1][:5], abs=1e-5)
    assert tokenized["tokens"] == backend.encode(CHATML_TEXT)


def test_formatter_uses_the_tokenizer_template_when_present(long_backend):
    tokenizer = copy.deepcopy(long_backend.tokenizer)
    tokenizer.chat_template = LLAMA_LIKE
    assert ChatFormatter(MODEL_TEMPLATE, tokenizer)(MESSAGES) == "<<SYS>>Be brief.<</SYS>>[INST]Natalia sold clips[/INST]"
    assert ChatFormatter(MODEL_TEMPLATE, long_backend.tokenizer)(MESSAGES) == CHATML_TEXT
    assert ChatFormatter(CHATML_TEMPLATE, tokenizer)(MESSAGES) == CHATML_TEXT  # a given source wins
    assert ChatFormatter(None, tokenizer)(MESSAGES) == "Be brief.Natalia sold clips"  # concatenated, as before
    assert ChatFormatter("<{content}>", tokenizer)(MESSAGES) == "<Be brief.Natalia sold clips>"


def test_a_template_that_refuses_the_messages_gives_400(long_backend):
    refusing = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}x"
    with _serve(long_backend, "long", chat_template=refusing) as url:
        status, body = post(url, "/chat/completions", {"model": "long", "messages": MESSAGES, "max_tokens": 1})
    assert status == 400 and body["error"]["param"] == "messages" and "user first" in body["error"]["message"]


def test_load_chat_template_kinds(tmp_path):
    assert load_chat_template("model") == MODEL_TEMPLATE and load_chat_template("chatml") == CHATML_TEMPLATE
    path = tmp_path / "llama.jinja"
    path.write_text(LLAMA_LIKE, encoding="utf-8")
    assert load_chat_template(str(path)) == LLAMA_LIKE
    assert ServerConfig("m", chat_template=LLAMA_LIKE).chat_template == LLAMA_LIKE
    with pytest.raises(BlackboxMIAError, match="Jinja"):
        ServerConfig("m", chat_template="neither a field nor jinja")


# -- the client's message templates ----------------------------------------------------------------


def test_message_templates_build_the_messages_and_name_the_condition(tmp_path):
    assert dialect_named("chat") is CHAT and CHAT.template is PLAIN and CHAT.condition == "chat-template"
    body = CHAT.payload("Natalia sold", max_tokens=1, temperature=0, top_n=3)
    assert body["messages"] == [{"role": "user", "content": "Natalia sold"}]

    chat = dialect_named("chat", "continuation")
    assert isinstance(chat, Chat) and chat.template is CONTINUATION
    assert chat.condition == "chat-template+continuation" and len(chat.notes) == 2
    assert (CHAT.key, chat.key, dialect_named("completions").key) == ("chat", "chat+continuation", "completions")
    assert "calibrate" in chat.notes[1]
    body = chat.payload("Natalia sold", max_tokens=1, temperature=0, top_n=3)
    assert body["messages"] == [{"role": "system", "content": CONTINUATION_SYSTEM},
                                {"role": "user", "content": "Natalia sold"}]
    assert body["top_logprobs"] == 3 and body["logprobs"] is True

    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"messages": [{"role": "system", "content": "Recite."},
                                             {"role": "user", "content": "Text: {text}"}]}), encoding="utf-8")
    mine = dialect_named("chat", str(path))
    assert mine.template.name.startswith("file:mine.json@") and len(mine.template.name) == len("file:mine.json@") + 12
    assert mine.condition == f"chat-template+{mine.template.name}"
    assert mine.payload("a {text} b", max_tokens=1, temperature=0, top_n=None)["messages"][1] == \
        {"role": "user", "content": "Text: a {text} b"}  # the prefix is inserted once, never re-read


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "no field"}],
    [{"role": "user", "content": "{text} {text}"}],
    [{"role": "user", "content": "{text}"}, {"role": "assistant", "content": "ok"}],
    [{"role": "wizard", "content": "{text}"}],
    [{"role": "user", "content": 5}],
])
def test_bad_message_templates_are_refused(tmp_path, messages):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"messages": messages}), encoding="utf-8")
    with pytest.raises(BlackboxMIAError, match="message template"):
        load_message_template(str(path))


def test_template_spec_errors(tmp_path):
    with pytest.raises(BlackboxMIAError, match="needs endpoint='chat'"):
        dialect_named("completions", "continuation")
    with pytest.raises(BlackboxMIAError, match="cannot read chat template"):
        dialect_named("chat", str(tmp_path / "missing.json"))
    (tmp_path / "x.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(BlackboxMIAError, match="must be JSON"):
        dialect_named("chat", str(tmp_path / "x.json"))
    with pytest.raises(BlackboxMIAError):
        MessageTemplate("empty", ())


async def test_continuation_through_the_emulator_equals_white_box_on_chatml(long_backend, tmp_path):
    """The client's continuation request through the emulator's ChatML: the first assistant
    token's top 5 are the white-box model's after the rendered system + user turns."""
    backend = long_backend
    prefix = gsm8k_questions(1)[0][:40]
    rendered = (f"<|im_start|>system\n{CONTINUATION_SYSTEM}<|im_end|>\n<|im_start|>user\n{prefix}<|im_end|>\n"
                "<|im_start|>assistant\n")
    row = backend.next_token_logprobs([backend.encode(rendered)])[0]
    with _serve(backend, "long", chat_template=MODEL_TEMPLATE) as url:
        client = ApiClient(ApiConfig(base_url=url, model="long", endpoint="chat", max_retries=0))
        try:
            answer = await client.request(dialect_named("chat", "continuation"), prefix, max_tokens=1,
                                          temperature=0.0, top_n=5)
        finally:
            await client.close()
    listed = answer["tokens"][0]["top"]
    assert [e["token"] for e in listed] == [backend.codec.token_string(i) for i in top(row, 5)]
    assert [e["logprob"] for e in listed] == pytest.approx([float(row[i]) for i in top(row, 5)], abs=1e-5)
    assert answer["usage"]["prompt_tokens"] == len(backend.encode(rendered))
