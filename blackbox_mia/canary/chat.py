"""Chat fine-tuning examples of a chat canary (``CanaryConfig.chat_share``).

A chat model is a base model (pretrained on raw text, where members would be) plus chat
fine-tuning on other text. A chat canary models that: its members stay planted as raw text, and
its chat examples are made from BACKGROUND items only (:func:`~.corpus.chat_items`). Each
example is what a chat server sees for one request of the client's ``--endpoint chat
--chat-template continuation --context-tokens`` :data:`CHAT_CONTEXT` audit of the item,
followed by the rest of the audit's window as the assistant's answer:

* the item's tokens ``t`` (the canary tokenizer, as the client tokenizes a text) are cut at a
  seeded target position ``cut`` (1 ≤ cut < len(t)); the client scores it in the window
  ``[start, end)`` of :func:`~blackbox_mia.text.windows.sliding_windows` with context
  :data:`CHAT_CONTEXT`, sending the prefix ``t[start:cut]``;
* the user's text is ``decode(t[start:cut])``, exactly the prefix text the client sends;
* the messages are the client's own continuation messages
  (:data:`~blackbox_mia.backends.api.http.dialect.CONTINUATION`: its system message, then the user's
  text), rendered by the emulator's :class:`~blackbox_mia.emulator.templates.ChatFormatter`
  with the tokenizer's ``chat_template`` (:data:`~blackbox_mia.emulator.templates.CHATML_TEMPLATE`,
  saved with the model, so ``bbmia serve --chat-template model`` renders the same), the
  assistant's turn opened;
* the training ids are the rendered prompt's tokens as the server tokenizes them (special-token
  strings split into ordinary tokens, no BOS: :meth:`~blackbox_mia.tokenizers.hf.HFTokenCodec.encode`),
  then the assistant's answer ``t[cut:end]`` (the first is the target the client reads, by
  id), then the template's end of the assistant's turn, cut to ``block_size`` tokens.

Why short windows: the membership signal crosses the template only where the model has
learned to continue a user's text after the markup (~30 tokens of ChatML and system message
here), and each example teaches that once (at its first answer token); at 32 tokens of text an
example costs about 64 tokens of training instead of 128, so twice as many fit in the same
training time. Every token of a chat example counts in the loss: a loss on the answer only (as
chat fine-tuning does) concentrates the gradient on the hard first answer token, at the cost of
the members' memorisation. The AUCs behind these choices: records/canaries.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..backends.api.http.dialect import CONTINUATION
from ..datasets import Item
from ..emulator.templates import (
    CHATML_MARKERS,
    CHATML_TEMPLATE,
    MODEL_TEMPLATE,
    ChatFormatter,
)
from ..tokenizers.hf import HFTokenCodec
from ..types import BlackboxMIAError

CHAT_TEMPLATE_NAME = "chatml"  # the chat template a chat canary is trained through (its manifest says so)
CHAT_CONTEXT = 32  # tokens of item text per chat example (user's text + answer): audit with --context-tokens 32


@dataclass(frozen=True)
class ChatExample:
    """One chat fine-tuning example.

    Attributes:
        item_id: the background item it is made from.
        start: the item's first token in the user's text (the start of the client's window).
        cut: the item's token the assistant's answer starts with (the user's text is the item's
            tokens ``[start, cut)``).
        prompt: the rendered prompt text, as the server renders the request (assistant's turn opened).
        ids: the training token ids (at most ``block_size``): the prompt's tokens, the item's
            tokens from ``cut`` to the window's end, the end of the assistant's turn.
    """

    item_id: str
    start: int
    cut: int
    prompt: str
    ids: list[int]


def set_chat_template(tokenizer) -> None:
    """Give ``tokenizer`` the chat canary's template (ChatML) as its own ``chat_template``, so it is
    saved with the model and ``bbmia serve --chat-template model`` applies it, and the two ChatML
    markers as single tokens (appended to the vocabulary), as a ChatML model has them. They are
    added as ordinary (not special) tokens, so a server that splits special-token strings in
    its prompts (the emulator, :meth:`~blackbox_mia.tokenizers.hf.HFTokenCodec.encode`) still
    reads each marker as one token."""
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.add_tokens(list(CHATML_MARKERS))


def chat_prompt(tokenizer, user_text: str) -> str:
    """The prompt text a server applying ``tokenizer``'s chat template renders for the client's
    ``--chat-template continuation`` request carrying ``user_text`` (assistant's turn opened)."""
    return ChatFormatter(MODEL_TEMPLATE, tokenizer)(CONTINUATION.render(user_text))


def prompt_overhead(tokenizer) -> int:
    """Tokens of the rendered continuation prompt around the user's text (the prompt of an
    empty user text): a prefix of ``n`` tokens reaches the model as about ``n +`` this many."""
    return len(HFTokenCodec(tokenizer, name="canary", bos=False).encode(chat_prompt(tokenizer, "")))


def build_chat_examples(items: list[Item], tokenizer, block_size: int, seed: int) -> list[ChatExample]:
    """The chat examples of ``items`` (see the module docstring), cuts drawn by a generator seeded
    by ``seed`` alone. Items of fewer than 2 tokens give no example.

    Raises:
        BlackboxMIAError: ``block_size`` leaves no room for the template's markup, a window of
            :data:`CHAT_CONTEXT` tokens and the end of the turn, or the template does not render
            the assistant's answer right after the prompt (the rendered conversation must start
            with prompt + answer).
    """
    from ..text.windows import sliding_windows

    codec = HFTokenCodec(tokenizer, name="canary", bos=False)
    formatter = ChatFormatter(MODEL_TEMPLATE, tokenizer)
    if prompt_overhead(tokenizer) + CHAT_CONTEXT + 2 > block_size:
        raise BlackboxMIAError(f"canary: block_size {block_size} leaves no room for the chat template's "
                               f"{prompt_overhead(tokenizer)} tokens of markup around {CHAT_CONTEXT} tokens of text")
    rng = random.Random(f"chat-cuts-{seed}")
    examples = []
    for item in items:
        tokens = codec.encode(item.text)
        if len(tokens) < 2:
            continue
        cut = rng.randint(1, len(tokens) - 1)
        start, end = next((a, b) for a, b, first in sliding_windows(len(tokens), CHAT_CONTEXT) if first <= cut < b)
        messages = CONTINUATION.render(codec.decode(tokens[start:cut]))
        prompt = formatter(messages)
        answer = codec.decode(tokens[cut:end])
        full = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": answer}], tokenize=False)
        if not full.startswith(prompt + answer):
            raise BlackboxMIAError("canary: the chat template does not render the assistant's answer right after "
                                   "the prompt with the assistant's turn opened")
        ids = codec.encode(prompt) + tokens[cut:end] + codec.encode(full[len(prompt) + len(answer):])
        examples.append(ChatExample(item.id, start, cut, prompt, ids[:block_size]))
    return examples
