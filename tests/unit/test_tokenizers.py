"""The tokenizer layer: encode/decode and the one token-string convention, for tiktoken (the
shipped cl100k_base) and a Hugging Face byte-level BPE tokenizer trained offline here."""

from __future__ import annotations

import pytest

from blackbox_mia.tokenizers import (
    HFTokenCodec,
    TiktokenCodec,
    is_partial,
    load_codec,
    render_token,
)
from blackbox_mia.types import BlackboxMIAError

TEXTS = ["hello world", "naïve café", "東京タワー", "龘", "<|endoftext|> end"]


# -- render_token: the convention itself --------------------------------------------------------


def test_render_token_is_utf8_text_or_escaped_bytes():
    assert render_token(b" caf\xc3\xa9") == " café"
    assert render_token("日".encode()) == "日"
    assert render_token(b"\xe6\x97") == "bytes:\\xe6\\x97"  # first two of the three bytes of 日
    assert render_token(b"\xaf") == "bytes:\\xaf"
    assert render_token(b"") == ""


def test_is_partial():
    assert is_partial(b"\xe6\x97") and is_partial(b"\xaf") and is_partial(b"a\xc3")
    assert not is_partial("日".encode()) and not is_partial(b" caf\xc3\xa9") and not is_partial(b"")


# -- tiktoken (shipped BPE files, no network) ---------------------------------------------------


@pytest.fixture(scope="module")
def cl100k(tmp_path_factory) -> TiktokenCodec:
    return TiktokenCodec("cl100k_base", cache_dir=tmp_path_factory.mktemp("tiktoken"))


def test_tiktoken_ascii(cl100k):
    assert cl100k.name == "tiktoken:cl100k_base" and cl100k.bos_id is None
    ids = cl100k.encode("hello world")
    assert ids == [15339, 1917]
    assert [cl100k.token_string(i) for i in ids] == ["hello", " world"]


def test_tiktoken_accented(cl100k):
    ids = cl100k.encode("naïve café")
    assert ids == [3458, 38672, 588, 53050]
    assert [cl100k.token_bytes(i) for i in ids] == [b"na", b"\xc3\xaf", b"ve", b" caf\xc3\xa9"]
    assert [cl100k.token_string(i) for i in ids] == ["na", "ï", "ve", " café"]


def test_tiktoken_cjk_with_tokens_inside_a_character(cl100k):
    # 東 = e6 9d b1 is split 2 + 1 bytes, ワ = e3 83 af likewise; 京, タ, ー are whole tokens
    ids = cl100k.encode("東京タワー")
    assert ids == [14276, 109, 47653, 47307, 2845, 107, 11972]
    assert [cl100k.token_string(i) for i in ids] == [
        "bytes:\\xe6\\x9d", "bytes:\\xb1", "京", "タ", "bytes:\\xe3\\x83", "bytes:\\xaf", "ー",
    ]
    assert cl100k.decode(ids) == "東京タワー"
    assert cl100k.decode(ids[:1]) == "\ufffd"  # a partial character alone decodes to U+FFFD
    assert 14276 in cl100k.partial_ids and 47653 not in cl100k.partial_ids


def test_tiktoken_lookup_by_name_and_bytes(cl100k):
    assert cl100k.lookup("bytes:\\xe6\\x9d") == [14276]
    assert cl100k.lookup("ignored", token_bytes=list(b"\xe6\x9d")) == [14276]
    assert cl100k.lookup(" world") == [1917]
    assert cl100k.lookup("token_id:42") == [42]


def test_tiktoken_special_token_text_is_plain_text(cl100k):
    assert 100257 not in cl100k.encode("<|endoftext|>")  # 100257 = <|endoftext|> in cl100k


def test_unknown_tiktoken_encoding_is_a_user_error(tmp_path):
    with pytest.raises(BlackboxMIAError, match="unknown tiktoken encoding 'cl99k'"):
        TiktokenCodec("cl99k", cache_dir=tmp_path)


def test_load_codec_specs(tmp_path, monkeypatch):
    monkeypatch.setenv("BBMIA_CACHE_DIR", str(tmp_path))
    assert load_codec("cl100k_base", "any").name == "tiktoken:cl100k_base"
    assert load_codec("tiktoken:o200k_base", "any").name == "tiktoken:o200k_base"
    assert load_codec(None, "gpt-4").name == "tiktoken:cl100k_base"
    with pytest.raises(BlackboxMIAError, match="no tiktoken encoding known for model 'my-model'"):
        load_codec(None, "my-model")
    with pytest.raises(BlackboxMIAError, match=f"cannot load tokenizer '{tmp_path / 'missing'}': no such directory"):
        load_codec(str(tmp_path / "missing"), "any")


def test_gpt2_is_tiktokens_gpt2_encoding_offline_unless_a_directory_has_that_name(tmp_path, monkeypatch):
    """Issue 51: ``--tokenizer gpt2`` was taken for a Hugging Face hub name and failed offline."""
    monkeypatch.setenv("BBMIA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    for spec, model in (("gpt2", "any"), ("tiktoken:gpt2", "any"), (None, "gpt2")):
        codec = load_codec(spec, model)
        assert codec.name == "tiktoken:gpt2" and codec.bos_id is None and codec.vocab_size == 50257
        assert codec.encode("Hello world") == [15496, 995]  # GPT-2's ids
        assert codec.token_bytes(50256) == b"<|endoftext|>"
    (tmp_path / "gpt2").mkdir()  # a directory named gpt2 is a Hugging Face tokenizer directory
    with pytest.raises(BlackboxMIAError, match="cannot load tokenizer 'gpt2'"):
        load_codec("gpt2", "any")
    assert load_codec("tiktoken:gpt2", "any").name == "tiktoken:gpt2"


# -- Hugging Face byte-level BPE ------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf(tmp_path_factory) -> HFTokenCodec:
    """A byte-level BPE trained on a corpus with "é" and "café" but no CJK: é is one token of two
    bytes, each CJK character is three single-byte tokens. Saved and loaded from disk."""
    from blackbox_mia.canary.model import train_tokenizer

    corpus = ["the café is open, the café is nice, café au lait"] * 20
    path = tmp_path_factory.mktemp("hf_tok")
    train_tokenizer(corpus, vocab_size=300).save_pretrained(path)
    return HFTokenCodec.load(str(path))


def test_hf_ascii_and_accented(hf):
    ids = hf.encode("the café is nice")
    # the tokenizer's own pieces are GPT-2's byte-to-unicode forms; the codec maps them back
    assert hf.tokenizer.convert_ids_to_tokens(ids) == ["the", "ĠcafÃ©", "Ġis", "Ġnice"]
    assert [hf.token_string(i) for i in ids] == ["the", " café", " is", " nice"]
    assert hf.token_bytes(ids[1]) == b" caf\xc3\xa9"
    # ï never occurs in the corpus: its two bytes stay apart, each named by its escape
    assert [hf.token_string(i) for i in hf.encode("naïve")] == ["n", "a", "bytes:\\xc3", "bytes:\\xaf", "v", "e"]


def test_hf_cjk_tokens_are_single_bytes(hf):
    ids = hf.encode("日本")  # 日 = e6 97 a5, 本 = e6 9c ac, none merged
    assert [hf.token_string(i) for i in ids] == [
        "bytes:\\xe6", "bytes:\\x97", "bytes:\\xa5", "bytes:\\xe6", "bytes:\\x9c", "bytes:\\xac",
    ]
    assert set(ids) <= hf.partial_ids
    assert hf.lookup("bytes:\\xe6") == [ids[0]]
    assert hf.decode(ids) == "日本"


def test_hf_special_tokens(hf):
    assert hf.bos_id == 0 and hf.token_string(0) == "<|endoftext|>"
    assert 0 not in hf.encode("<|endoftext|>")  # quoted in a text, it is plain text
    assert HFTokenCodec(hf.tokenizer, "x", bos=False).bos_id is None


def test_hf_unknown_id_raises_key_error(hf):
    with pytest.raises(KeyError):
        hf.token_bytes(hf.vocab_size + 5)


# -- both codecs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec_fixture", ["cl100k", "hf"])
@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_is_byte_exact(request, codec_fixture, text):
    codec = request.getfixturevalue(codec_fixture)
    ids = codec.encode(text)
    assert codec.decode(ids) == text
    assert b"".join(codec.token_bytes(i) for i in ids) == text.encode("utf-8")
    assert [render_token(codec.token_bytes(i)) for i in ids] == [codec.token_string(i) for i in ids]


# -- long texts, window by window -----------------------------------------------------------------

LONG_PIECES = ["The capital of France is Paris: café, crème brûlée, ½ off. ", "東京は日本の首都です。", "\n\n", "  ",
               "\t", "12,345.6 ", "😀 emoji ", "naïve coöperation ", "<|endoftext|>"]


@pytest.mark.parametrize("codec_name", ["hf", "cl100k"])
@pytest.mark.parametrize("window, check", [(3000, 200), (20000, 1000)])
def test_long_encoder_gives_the_whole_text_s_tokens(request, codec_name, window, check):
    import random

    from blackbox_mia.tokenizers.long import LongEncoder

    codec = request.getfixturevalue(codec_name)
    rng = random.Random(0)
    text = "".join(rng.choice(LONG_PIECES) for _ in range(3000))  # ~60k characters: many windows
    encoder = LongEncoder(codec, window, check)
    calls = []
    encode = codec.encode
    codec.encode = lambda t: calls.append(len(t)) or encode(t)
    try:
        ids = encoder.encode(text)
    finally:
        del codec.encode
    assert ids == codec.encode(text)
    assert max(calls) <= window and len(calls) > 2 * len(text) // window  # windows and checks, never the whole


def test_long_encoder_falls_back_to_one_call_where_tokens_do_not_spell_the_text(hf):
    from blackbox_mia.tokenizers.long import LongEncoder

    class Prepending:  # a normalizing tokenizer: a space in front of every text it encodes
        vocab_size = hf.vocab_size
        token_bytes = staticmethod(hf.token_bytes)

        def encode(self, text: str) -> list[int]:
            return hf.encode(" " + text)

    text = "the café is open. " * 400
    calls = []
    codec = Prepending()
    encode = codec.encode
    codec.encode = lambda t: calls.append(len(t)) or encode(t)
    assert LongEncoder(codec, 1000, 100).encode(text) == hf.encode(" " + text)
    assert calls == [1000, len(text)]
