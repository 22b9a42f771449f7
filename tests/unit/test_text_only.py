"""Text-only scorers (SaMIA, CDD, TS-Guessing) on a scripted generation-only backend: prompts as
the papers build them, scores computed by hand, requests batched and counted exactly as the
estimate says, rows without log-probs, and the errors a user can meet."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.backends.base import GENERATE, Backend
from blackbox_mia.spend.plan import estimate_texts
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.text_only_runner import estimate_generated, score_generated, target_view
from blackbox_mia.results import ScoredText
from blackbox_mia.runner import score_texts
from blackbox_mia.scorers import parse_scorer, parse_scorers, text_only_specs
from blackbox_mia.scorers.cdd import peakedness
from blackbox_mia.scorers.text_only import TargetView, split_halves
from blackbox_mia.scorers.ts_guessing import instruction_prompt, parse_multiple_choice
from blackbox_mia.tokenizers import load_codec
from blackbox_mia.types import BlackboxMIAError, Generation, Provenance

AQUA = "Question: What is 2 + 3?\nOptions: A)4 B)5 C)six D)7 apples E)8\nRationale: 2 + 3 = 5\nAnswer: B"


class Scripted(Backend):
    """A generation-only backend whose answers come from ``answer(prompt text, sample)``; it
    records every call and counts what an API would send (1 greedy, else n, per prompt)."""

    kind = "scripted"
    features = frozenset({GENERATE})

    def __init__(self, answer, chat: bool = False, context: int | None = None):
        super().__init__()
        self.codec = load_codec("cl100k_base", "gpt-4")
        self.answer, self.chat, self.context = answer, chat, context
        self.calls: list[tuple] = []
        self.sent = 0

    async def _agenerate(self, prompts, max_new_tokens, temperature, n, seed, logprobs):
        self.calls.append((len(prompts), max_new_tokens, temperature, n, seed))
        self.sent += len(prompts) * (1 if temperature == 0 else n)
        provenance = Provenance("scripted", "m", "greedy" if temperature == 0 else "sample", False,
                                "chat-template" if self.chat else None)
        out = []
        for i, p in enumerate(prompts):
            text = p if isinstance(p, str) else self.codec.decode(list(p))
            for j in range(n):
                reply = self.answer(text, j)
                ids = self.codec.encode(reply)
                out.append(Generation(reply, np.array(ids), [self.codec.token_string(t) for t in ids], None, "length",
                                      i, j, provenance))
        return out

    def estimate_generation(self, prompt_tokens, max_new_tokens, sent=None):
        from blackbox_mia.cost.estimate import CostEstimate

        super().estimate_generation(prompt_tokens, max_new_tokens, sent)
        return CostEstimate(requests=sum(sent or [1] * len(prompt_tokens)))

    def describe(self):
        return {"backend": "scripted", "condition": "chat-template" if self.chat else None}


@pytest.fixture()
def codec():
    return load_codec("cl100k_base", "gpt-4")


def test_samia_is_mean_rouge1_recall_of_the_true_suffix(codec):
    text = "alpha beta gamma delta one two three four"
    halves = split_halves("samia", text, TargetView(codec), 0.5, 128)
    assert halves.prefix == "alpha beta gamma delta" and halves.suffix == " one two three four"
    replies = ["one two nine", "four three two one extra", "nothing"]  # recall 2/4, 4/4, 0/4
    backend = Scripted(lambda prompt, j: replies[j])
    scores = score_texts([text], parse_scorers("samia:n=3"), {"target": backend})
    assert scores[0][1] is None  # no log-prob was computed
    assert scores[0][0]["samia:n=3"].value == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert backend.calls == [(1, len(halves.suffix_ids), 1.0, 3, 0)]  # the prefix, sampled 3 times, seed 0


def test_cdd_peakedness_by_hand():
    # l = 4, alpha * l = 1: distances 0, 1, 4 -> two of three within
    assert peakedness([1, 2, 3, 4], [[1, 2, 3, 4], [1, 2, 3, 5], [9, 9, 9, 9]], 0.25) == pytest.approx(2 / 3)
    # the longest output sets l: [1] vs [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] has distance 9 <= 0.9 * 10
    assert peakedness([1], [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]], 0.9) == 1.0
    assert peakedness([1], [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]], 0.85) == 0.0


def test_cdd_scores_samples_against_the_greedy_output():
    text = "one two three four five six seven eight"
    backend = Scripted(lambda prompt, j: " nine ten eleven twelve thirteen" if j % 2 else " x y z w v u t s r q")
    got = score_texts([text], parse_scorers("cdd:n=4,alpha=0.05"), {"target": backend})[0][0]["cdd:n=4"]
    # the greedy answer is sample 0's reply: samples 0 and 2 equal it, 1 and 3 are far away
    assert got.value == pytest.approx(0.5)
    assert [c[2:4] for c in backend.calls] == [(0.0, 1), (0.8, 4)]


def test_ts_guessing_reads_aqua_and_hides_the_last_wrong_option(codec):
    item = parse_multiple_choice(AQUA)
    assert item.options == ("4", "5", "six", "7 apples", "8") and item.answer == 1 and item.masked == 4
    assert item.question == "What is 2 + 3?"
    assert parse_multiple_choice("Question: x\nAnswer: A") is None
    shipped = load_shipped_or_jsonl("aqua:test").items
    for it in shipped:  # every shipped AQuA item parses into its own options
        parsed = parse_multiple_choice(it.text)
        assert [o for o in parsed.options] == [o[2:].rstrip() for o in it.meta["options"]]
    prompt = instruction_prompt(item)
    assert "option E" in prompt and "E: [MASK]" in prompt and "D: 7 apples" in prompt and "8" not in prompt


@pytest.mark.parametrize("reply, hit", [("8 ", 1.0), ("8\nRationale", 1.0), ("8 F)9", 1.0), ("9", 0.0), ("88", 0.0)])
def test_ts_guessing_continuation_exact_match(reply, hit):
    seen = []
    backend = Scripted(lambda prompt, j: seen.append(prompt) or reply)
    got = score_texts([AQUA], parse_scorers("ts_guessing"), {"target": backend})[0][0]["ts_guessing"]
    assert seen == [AQUA[: AQUA.index("E)") + 2]] and got.value == hit


@pytest.mark.parametrize("reply, hit", [("E: 8", 1.0), ("8", 1.0), ("Option E) 8", 1.0), ("E: 9", 0.0)])
def test_ts_guessing_instruction_form_on_chat_targets(reply, hit):
    seen = []
    backend = Scripted(lambda prompt, j: seen.append(prompt) or reply, chat=True)
    got = score_texts([AQUA], parse_scorers("ts_guessing"), {"target": backend})[0][0]["ts_guessing"]
    assert seen == [instruction_prompt(parse_multiple_choice(AQUA))] and got.value == hit


def test_a_short_context_keeps_prompts_inside_the_window(codec):
    text = " ".join(f"w{i}" for i in range(100))
    backend = Scripted(lambda prompt, j: "", context=21)  # no BOS: window 21
    (request,) = parse_scorer("samia").requests(text, target_view(backend))
    assert len(request.prompt) + request.max_new_tokens <= 21
    assert tuple(codec.encode(text)[: len(request.prompt)]) == request.prompt


def test_requests_are_batched_deduplicated_and_estimated_exactly():
    texts = [f"text number {i} with some words after it" for i in range(21)]
    backend = Scripted(lambda prompt, j: "words")
    scorers = parse_scorers("samia:n=3,cdd:n=5,samia:n=3,seed=1")
    estimate = estimate_generated(texts, scorers, backend)
    assert estimate.requests == 21 * (3 + 1 + 5 + 3)
    assert estimate_texts(texts, scorers, {"target": backend})["target"].requests == estimate.requests
    score_generated(texts, scorers, backend)
    assert backend.sent == estimate.requests
    # CDD's greedy and sampled requests and SaMIA's two seeds: 4 calls per batch of 16 texts
    assert len(backend.calls) == 8 and sorted(c[0] for c in backend.calls) == [5] * 4 + [16] * 4


def test_text_only_rows_have_no_tokens_and_keep_the_condition():
    backend = Scripted(lambda prompt, j: "x", chat=True)
    (scores, lp), = score_texts(["some words to continue here"], parse_scorers("samia:n=1"), {"target": backend})
    row = ScoredText.from_scores("a", 1, scores, lp, condition="chat-template")
    assert row.to_json() == {"id": "a", "n_tokens": 0, "scores": {"samia:n=1": 0.0}, "label": 1,
                             "condition": "chat-template"}


def test_errors_are_clear():
    backend = Scripted(lambda prompt, j: "x")
    with pytest.raises(BlackboxMIAError, match="needs multiple-choice items in the AQuA format"):
        score_texts(["Question: no options here"], parse_scorers("ts_guessing"), {"target": backend})
    assert backend.calls == []  # refused before anything was generated
    with pytest.raises(BlackboxMIAError, match="form must be one of"):
        parse_scorer("samia:form=poem")
    with pytest.raises(BlackboxMIAError, match="n must be"):
        parse_scorer("cdd:n=0")
    with pytest.raises(BlackboxMIAError, match="does not offer 'logprobs'"):
        score_texts(["a b c"], parse_scorers("loss,samia"), {"target": backend})
    with pytest.raises(BlackboxMIAError, match="scores generations"):
        parse_scorer("samia").score("a", None, [])
    assert text_only_specs(True) == ("samia", "cdd", "ts_guessing") and text_only_specs(False) == ("samia", "cdd")


class Tracked(Scripted):
    """A scripted backend that also offers log-probs, at ``rate`` estimated requests per token."""

    features = frozenset({GENERATE, "logprobs"})

    def __init__(self, rate: float):
        super().__init__(lambda prompt, j: "x")
        self.rate = rate

    async def _aestimate_cost(self, texts):
        from blackbox_mia.cost.estimate import CostEstimate

        tokens = sum(len(self.codec.encode(t)) for t in texts)
        return CostEstimate(requests=round(self.rate * tokens), strategy="bisect")


def test_routing_by_capability_and_cost():
    from blackbox_mia.audits.routing import route, routed_specs

    generation_only = Scripted(lambda prompt, j: "x")
    found = route(generation_only, ["a b c"])
    assert found.methods == "text-only" and "gives no log-probs" in found.reason
    assert routed_specs("auto", generation_only, [AQUA], ("min_k",))[0] == ("samia", "cdd", "ts_guessing")
    assert routed_specs("auto", generation_only, ["a b c"], ("min_k",))[0] == ("samia", "cdd")
    assert routed_specs("logprobs", generation_only, ["a b c"], ("min_k",))[0] == ("min_k",)  # as asked
    costly, cheap = route(Tracked(6.0), ["one two three four"]), route(Tracked(1.0), ["one two three four"])
    assert costly.methods == "text-only" and costly.requests_per_token == pytest.approx(6.0)
    assert cheap.methods == "logprobs" and routed_specs("text-only", Tracked(1.0), ["a b"], ("min_k",))[0] == ("samia", "cdd")
    with pytest.raises(BlackboxMIAError, match="methods= must be one of"):
        routed_specs("all", generation_only, ["a"], ("min_k",))


def test_ts_guessing_keyword_picks_the_longest_content_word():
    from blackbox_mia.scorers.ts_guessing import pick_keyword

    keyword = pick_keyword("Question: Natalia sold clips to 4800 of her neighbours in April.\nAnswer: 48")
    # candidates of 4+ letters: Natalia (7), sold, clips, neighbours (10), April; 4800 is a number
    assert keyword.word == "neighbours" and keyword.masked == "Natalia sold clips to 4800 of her [MASK] in April."
    assert pick_keyword("Question: Which of these could have been those?\nAnswer: x") is None  # all stopwords
    tie = pick_keyword("Amber met Micah and Ahito")  # three of 5 letters: the first
    assert (tie.word, tie.start) == ("Amber", 0)


@pytest.mark.parametrize("reply, hit", [(" neighbours in April.", 1.0), (" Neighbours", 1.0), (" friends", 0.0),
                                        (" neighbourhood", 0.0)])
def test_ts_guessing_keyword_continuation_form(reply, hit, codec):
    text = "Question: Natalia sold clips to 4800 of her neighbours in April.\nAnswer: 48"
    seen = []
    backend = Scripted(lambda prompt, j: seen.append(prompt) or reply)
    got = score_texts([text], parse_scorers("ts_guessing_keyword"), {"target": backend})[0][0]["ts_guessing_keyword"]
    assert seen == ["Question: Natalia sold clips to 4800 of her"] and got.value == hit  # no space: the word's token has it
    assert backend.calls[0][1] == len(codec.encode(" neighbours")) + 4  # the word's tokens + extra_tokens


@pytest.mark.parametrize("reply, hit", [("neighbours", 1.0), ('"Neighbours".', 1.0), ("**neighbours**", 1.0),
                                        ("friends", 0.0)])
def test_ts_guessing_keyword_instruction_form(reply, hit):
    from blackbox_mia.scorers.ts_guessing import keyword_prompt, pick_keyword

    text = "Question: Natalia sold clips to 4800 of her neighbours in April.\nAnswer: 48"
    seen = []
    backend = Scripted(lambda prompt, j: seen.append(prompt) or reply, chat=True)
    got = score_texts([text], parse_scorers("ts_guessing_keyword"), {"target": backend})[0][0]["ts_guessing_keyword"]
    assert seen == [keyword_prompt(pick_keyword(text))] and "her [MASK] in April." in seen[0] and got.value == hit
    with pytest.raises(BlackboxMIAError, match="no content word"):
        parse_scorer("ts_guessing_keyword").requests("Question: is it 4 or 5?", target_view(backend))
