"""Spelled read-out: positions inside a character read from one grammar-constrained request,
identified by the bytes the sampled tokens spell (never by lossy names alone)."""

from __future__ import annotations

import pytest

from blackbox_mia.backends.api.http.client import ApiClient
from blackbox_mia.backends.api.http.config import ApiConfig
from blackbox_mia.backends.api.endpoint import Endpoint
from blackbox_mia.backends.api.http.errors import APIConnectionError, ApiError
from blackbox_mia.backends.api.http.grammar import gbnf_literal, spelling_grammar
from blackbox_mia.backends.api.tracker.spelling import Speller, unique_spelling
from blackbox_mia.backends.api.tracker.strategies import Position
from blackbox_mia.tokenizers.load import load_codec
from blackbox_mia.types import BlackboxMIAError

from ..realserver.server import free_port


@pytest.fixture(scope="module")
def codec():
    """GPT-2's byte-level BPE (the shipped r50k_base): CJK characters split into partial tokens."""
    return load_codec("tiktoken:r50k_base", "gpt2")


def test_gbnf_literal_escapes_everything_but_letters_digits_and_spaces():
    assert gbnf_literal('Ab 1"\\') == '"Ab 1\\u0022\\u005C"'
    assert gbnf_literal("の😀\n") == '"\\u306E\\U0001F600\\u000A"'
    assert spelling_grammar("é") == 'root ::= "\\u00E9" [ -~]*'


PIECES = {1: b"\xe3", 2: b"\x81", 3: b"\xae", 4: b"\xe3\x81", 5: b"\x81\xae", 6: b"a"}


@pytest.mark.parametrize("text, steps, expected", [
    ("の", [{1}, {2}, {3}], [1, 2, 3]),  # one byte each: one spelling
    ("の", [{1, 4}, {2, 3}, {3}], [1, 2, 3]),  # 4 then 2 does not spell "の"; 4 then 3 leaves no third byte
    ("の", [{1, 4}, {2, 3, 5}], None),  # 1+5 and 4+3 both spell "の": not proven
    ("の", [{1, 4}, {3, 5}], None),
    ("のa", [{4}, {3}, {6}], [4, 3, 6]),
    ("のa", [{4}, {3}], None),  # every byte must be spelled: a third token was generated unseen
    ("の", [{4}, {2}], None),  # spells something else
    ("の", [None, {3}], None),  # an unknown name proves nothing
])
def test_unique_spelling_is_the_one_candidate_sequence_that_spells_the_text(text, steps, expected):
    steps = [None if s is None else frozenset(s) for s in steps]
    assert unique_spelling(text.encode(), steps, PIECES.get) == expected


class SpellingServer:
    """A text-prompt server that honours the spelled request's grammar: it generates the text's
    own tokens after the prompt, named as llama-cpp-python names them (bytes decoded with errors
    ignored), each with the log-prob ``-(position + 1) / 10``; ``path`` replaces what it generates."""

    def __init__(self, codec, text: str, path: list[int] | None = None):
        self.config = type("C", (), {"base_url": "http://x/v1", "model": "m", "chat_template": None})()
        self.codec, self.ids, self.path, self.sent = codec, codec.encode(text), path, []

    async def request(self, dialect, prompt, **options):
        self.sent.append({"prompt": prompt, **options})
        j = len(self.codec.encode(prompt))
        generated = self.path or self.ids[j : j + options["max_tokens"]]
        tokens = [{"token": self.codec.token_bytes(t).decode("utf-8", "ignore"), "logprob": -(j + k + 1) / 10,
                   "top": []} for k, t in enumerate(generated)]
        text = b"".join(map(self.codec.token_bytes, generated)).decode("utf-8", "ignore")
        return {"tokens": tokens[: options["max_tokens"]], "past_max_tokens": tokens[options["max_tokens"]:],
                "text": text}


def endpoint_for(server, codec, grammar=True) -> Endpoint:
    endpoint = Endpoint(server, codec, "completions", token_id_prompts=False)
    endpoint.grammar = grammar
    return endpoint


TOKYO = "Tokyo 京都"  # r50k: "Tok", "yo", " ", "\xe4\xba", "\xac", "\xe9\x83", "\xbd"


async def test_the_tokens_of_a_character_are_read_from_one_request(codec):
    server = SpellingServer(codec, TOKYO)
    ids = server.ids
    assert [codec.token_bytes(t) for t in ids[3:5]] == [b"\xe4\xba", b"\xac"]  # "京", both named ""
    speller = Speller(endpoint_for(server, codec), 100.0)
    inside = Position.at(ids, 0, 4, len(ids), None)  # target "\xac" after a prefix ending inside "京"
    assert not speller.endpoint.sendable(inside.prefix)
    assert speller.span(inside) == (3, 4)
    estimate = await speller.resolve(inside)
    assert (estimate.value, estimate.lower, estimate.upper, estimate.strategy) == (-0.5, -0.5, -0.5, "spelled")
    [sent] = server.sent
    assert sent["prompt"] == "Tokyo " and sent["max_tokens"] == 2 and sent["bias"] == {ids[3]: 100.0, ids[4]: 100.0}
    assert sent["extra"] == {"grammar": 'root ::= "\\u4EAC" [ -~]*'}
    # the span's first position (an open target after a sendable prefix) reads the same answer
    opening = await speller.resolve(Position.at(ids, 0, 3, len(ids), None))
    assert opening.value == -0.4 and server.sent == [sent, sent]


async def test_tokens_past_max_tokens_are_part_of_the_proof(codec):
    ids = codec.encode(TOKYO)
    # the server split "京" into three single bytes: two fit max_tokens, the third came past it
    path = [t for t in codec.partial_ids if len(codec.token_bytes(t)) == 1 and codec.token_bytes(t) in b"\xe4\xba\xac"]
    path = sorted(path, key=lambda t: b"\xe4\xba\xac".index(codec.token_bytes(t)))
    assert len(path) == 3
    speller = Speller(endpoint_for(SpellingServer(codec, TOKYO, path=path), codec), 100.0)
    assert await speller.resolve(Position.at(ids, 0, 4, len(ids), None)) is None


async def test_a_spelling_the_names_cannot_prove_is_no_value(codec):
    text = "Tokyo 東京"  # r50k: " 東" is " \xe6" + "\x9d" + "\xb1", named " ", "", ""
    server = SpellingServer(codec, text)
    ids = server.ids
    assert [codec.token_bytes(t) for t in ids[2:5]] == [b" \xe6", b"\x9d", b"\xb1"]
    # " " + "\xe6\x9d" + "\xb1" spells it too, with the same names: not proven
    assert unique_spelling(" 東".encode(), [frozenset(codec.lookup(n)) for n in (" ", "", "")], codec.token_bytes) is None
    speller = Speller(endpoint_for(server, codec), 100.0)
    assert await speller.resolve(Position.at(ids, 0, 3, len(ids), None)) is None and len(server.sent) == 1


async def test_a_server_that_spells_otherwise_gives_no_value(codec):
    ids = codec.encode(TOKYO)
    wrong = [ids[3]] + codec.encode("x")  # the character left unfinished: the bytes do not spell it
    speller = Speller(endpoint_for(SpellingServer(codec, TOKYO, path=wrong), codec), 100.0)
    assert await speller.resolve(Position.at(ids, 0, 4, len(ids), None)) is None


def test_no_span_without_a_sendable_start_or_a_character_end(codec):
    ids = codec.encode("東京")  # the text starts inside a character: no prefix of at least one token is text
    speller = Speller(endpoint_for(SpellingServer(codec, "東京"), codec), 100.0)
    assert speller.span(Position.at(ids, 0, 1, len(ids), None)) is None
    cut = codec.encode("Tokyo 東")
    assert speller.span(Position.at(cut, 0, len(cut) - 2, len(cut) - 1, None)) is None  # the window ends inside "東"
    ids = codec.encode(TOKYO)  # "京" is ids[3:5]: a request from "Tokyo " generates 2 tokens, and may overrun by 3
    assert speller.span(Position.at(ids, 0, 4, len(ids), context=8)) == (3, 4)  # room 4: 1 more token + 3
    assert speller.span(Position.at(ids, 0, 4, len(ids), context=7)) is None  # room 3: llama.cpp could run past it


async def test_an_upward_bias_on_an_open_token_needs_a_grammar_the_probe_saw(codec):
    server = SpellingServer(codec, TOKYO)
    ids = server.ids
    endpoint = endpoint_for(server, codec, grammar=False)
    with pytest.raises(BlackboxMIAError, match="not shown to honour a grammar"):
        await endpoint.spell(ids[:3], ids[3:5], 100.0)
    with pytest.raises(BlackboxMIAError, match="not whole characters"):
        await endpoint.spell(ids[:3], ids[3:4], 0.0)
    assert server.sent == []  # refused before sending
    steps, spelled = await endpoint.spell(ids[:3], ids[3:5], 0.0)  # no bias: safe anywhere
    assert spelled == "京" and len(steps) == 2 and server.sent[0]["bias"] is None


async def test_a_server_that_stops_answering_is_named_with_the_request_pattern(codec, tmp_path):
    """A server that dies mid-run: one error naming what the last request asked (here a spelled
    request: a bias on tokens that end inside a character, under a grammar), and that answers so
    far are cached."""
    config = ApiConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", max_retries=1, backoff_base_s=0.01)
    client = ApiClient(config)
    endpoint = Endpoint(client, codec, "completions", token_id_prompts=False)
    endpoint.grammar = True
    endpoint.answered = 3  # it answered earlier requests, then stopped
    ids = codec.encode(TOKYO)
    try:
        with pytest.raises(ApiError, match=r"stopped answering during a request of this pattern: 3 prompt tokens, "
                                           r"max_tokens 2, 2 token\(s\) biased upward \(1 ending inside a character\), "
                                           r"0 downward, a grammar\. Answers so far are cached") as err:
            await endpoint.spell(ids[:3], ids[3:5], 100.0)
        assert err.value.fault == "transient" and err.value.status_code is None
        assert isinstance(err.value, APIConnectionError)  # the client's typed error, kept
    finally:
        await client.close()
