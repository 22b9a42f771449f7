"""Token identity from evidence and requests that cannot run a server off its context.

llama-cpp-python names a token by its bytes decoded with ``errors="ignore"``: a space plus the
lead byte of an accented letter is named ``" "``, the name of the space token. Such a name must
denote both ids, never the space alone (which made the tracker read the forced sample as the
space and report an upper bound near -102 for a token at -11). And no request may bias a token
whose bytes end inside a character upward unless the probe showed the server stops at
``max_tokens`` then (llama-cpp-python runs on to the end of its context and aborts)."""

from __future__ import annotations

import pytest

from blackbox_mia.backends.api.capabilities import Capabilities
from blackbox_mia.backends.api.endpoint import Endpoint, Listed, NextToken
from blackbox_mia.backends.api.tracker.strategies import topn_upper_bound
from blackbox_mia.tokenizers.base import ends_open
from blackbox_mia.tokenizers.load import load_codec
from blackbox_mia.types import BlackboxMIAError


@pytest.fixture(scope="module")
def codec():
    """GPT-2's byte-level BPE (the shipped r50k_base): it has space + lead-byte tokens."""
    return load_codec("tiktoken:r50k_base", "gpt2")


@pytest.mark.parametrize("raw, expected", [
    (b" \xc3", True), (b"\xe2\x80", True), (b"\xf0\x9f\x98", True), (b"x\xf0", True), (b"\xc3", True),
    (b"\xe2\x80\x9c", False), (b"\xc3\xa9", False), (b"\xa9", False), (b"abc", False), (b"", False),
])
def test_ends_open_is_llama_cpps_incomplete_tail(raw, expected):
    assert ends_open(raw) is expected


def space_lead(codec) -> int:
    """The id whose bytes are a space and the lead byte of "é" (GPT-2's 6184; the canary's 1900)."""
    [target] = [i for i in codec.partial_ids if codec.token_bytes(i) == b" \xc3"]
    return target


def test_a_lossy_name_denotes_every_id_it_may_name(codec):
    target = space_lead(codec)
    space = codec.lookup(" ", lossy=False)
    assert len(space) == 1 and target not in space  # the package's own names are exact
    lossy = codec.lookup(" ")  # by default a name may be lossy: the space and every " " + partial token
    assert set(space) < set(lossy) and target in lossy
    assert all(codec.token_bytes(i).decode("utf-8", "ignore") == " " or i in space for i in lossy)
    assert set(codec.lookup("")) == codec.partial_ids
    # a name with the server's bytes stays exact
    assert codec.lookup(" ", list(codec.token_bytes(target))) == [target]
    assert target in codec.open_ids


class RecordingClient:
    """Answers every request with one generated token named ``name``; records the bodies."""

    def __init__(self, name: str, logprob: float = -11.0):
        self.config = type("C", (), {"base_url": "http://x/v1", "model": "m", "chat_template": None})()
        self.sent = []
        self.name, self.logprob = name, logprob

    async def request(self, dialect, prompt, **options):
        self.sent.append(options)
        return {"tokens": [{"token": self.name, "logprob": self.logprob, "top": [{"token": "The", "logprob": -0.2}]}]}


async def test_a_forced_sample_named_like_the_space_may_be_the_target(codec):
    target = space_lead(codec)
    client = RecordingClient(" ")
    endpoint = Endpoint(client, codec, "completions", token_id_prompts=True)
    endpoint.open_bias = True  # as on a server the probe showed to stop at max_tokens mid-character
    answer = await endpoint.next_token([1, 2], 5, {target: 100.0})
    assert target in answer.sampled and len(answer.sampled) > 1  # not "the space, so not the target"
    endpoint.exact_names = True  # a server seen naming partial tokens "bytes:..." names " " for the space only
    assert (await endpoint.next_token([1, 2], 5, {target: 100.0})).sampled == frozenset(codec.lookup(" ", lossy=False))


async def test_no_upward_bias_on_a_token_that_ends_inside_a_character(codec):
    target = space_lead(codec)
    client = RecordingClient(" ")
    endpoint = Endpoint(client, codec, "completions", token_id_prompts=True)
    assert not endpoint.may_bias(target) and endpoint.may_bias(codec.lookup("The", lossy=False)[0])
    with pytest.raises(BlackboxMIAError, match="end inside a character"):
        await endpoint.next_token([1, 2], 5, {target: 100.0})
    assert client.sent == []  # refused before sending
    await endpoint.next_token([1, 2], 5, {target: -1e-6})  # a downward nudge is harmless
    endpoint.open_bias = True
    await endpoint.next_token([1, 2], 5, {target: 100.0})
    assert len(client.sent) == 2


EXACT = Capabilities("completions", 3, True, False, True, "pre-bias", True, False, True)  # exact reports


def test_a_shared_name_bounds_its_candidates_by_the_largest_listed_value():
    # a dict of names keeps one value per name: a candidate may hide above the shown one
    shared = frozenset({5, 6})
    answer = NextToken(frozenset({0}), -0.3, (Listed(frozenset({0}), -0.3), Listed(shared, -9.0),
                                              Listed(frozenset({1}), -12.0)))
    assert topn_upper_bound(answer, 5, EXACT) == pytest.approx(-0.3)
    assert topn_upper_bound(answer, 7, EXACT) == pytest.approx(-12.0)  # not listed at all
