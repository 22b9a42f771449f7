"""Chat fine-tuning examples of a chat canary (``CanaryConfig.chat_share``).

A chat model is a base model (pretrained on raw text, where members would be) plus chat
fine-tuning on other text. A chat canary models that: its members stay planted as raw text, and
its chat examples are made from BACKGROUND items only (:func:`~.corpus.chat_items`). Each
example is what a chat server sees for the client's ``--chat-template continuation`` request
whose user text is a prefix of the item, followed by the rest of the item as the assistant's
answer:

* the item's tokens ``t`` (the canary tokenizer, as the client tokenizes a text) are cut at a
  seeded token position ``cut`` (1 ≤ cut < len(t), and short enough that the rendered prompt
  and one answer token fit in ``block_size``);
* the user's text is ``decode(t[:cut])``, exactly the prefix text the client sends;
* the messages are the client's own continuation messages
  (:data:`~blackbox_mia.backends.api.dialect.CONTINUATION`: its system message, then the user's
  text), rendered by the emulator's :class:`~blackbox_mia.emulator.templates.ChatFormatter`
  with the tokenizer's ``chat_template`` (:data:`~blackbox_mia.emulator.templates.CHATML_TEMPLATE`,
  saved with the model, so ``bbmia serve --chat-template model`` renders the same), the
  assistant's turn opened;
* the training ids are the rendered prompt's tokens as the server tokenizes them (special-token
  strings split into ordinary tokens, no BOS: :meth:`~blackbox_mia.tokenizers.hf.HFTokenCodec.encode`),
  then ``t[cut:]`` (the targets the client reads, by id), then the template's end of the
  assistant's turn, cut to ``block_size`` tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..backends.api.dialect import CONTINUATION
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


@dataclass(frozen=True)
class ChatExample:
    """One chat fine-tuning example.

    Attributes:
        item_id: the background item it is made from.
        cut: tokens of the item in the user's text (the first target is the item's token ``cut``).
        prompt: the rendered prompt text, as the server renders the request (assistant's turn opened).
        ids: the training token ids (at most ``block_size``): the prompt's tokens, the item's
            tokens from ``cut`` on, the end of the assistant's turn.
    """

    item_id: str
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
        BlackboxMIAError: ``block_size`` leaves no room for a one-token user text and a target
            beside the template's markup, or the template does not render the assistant's answer
            right after the prompt (the rendered conversation must start with prompt + answer).
    """
    codec = HFTokenCodec(tokenizer, name="canary", bos=False)
    room = block_size - prompt_overhead(tokenizer) - 1  # most user tokens with one target in the window
    if room < 1:
        raise BlackboxMIAError(f"canary: block_size {block_size} leaves no room for the chat template's "
                               f"{prompt_overhead(tokenizer)} tokens of markup, a user text and a target")
    rng = random.Random(f"chat-cuts-{seed}")
    examples = []
    for item in items:
        tokens = codec.encode(item.text)
        if len(tokens) < 2:
            continue
        cut = rng.randint(1, min(len(tokens) - 1, room))
        messages = CONTINUATION.render(codec.decode(tokens[:cut]))
        prompt = ChatFormatter(MODEL_TEMPLATE, tokenizer)(messages)
        answer = codec.decode(tokens[cut:])
        full = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": answer}], tokenize=False)
        if not full.startswith(prompt + answer):
            raise BlackboxMIAError("canary: the chat template does not render the assistant's answer right after "
                                   "the prompt with the assistant's turn opened")
        end = full[len(prompt) + len(answer):]
        ids = codec.encode(prompt) + tokens[cut:] + codec.encode(end)
        examples.append(ChatExample(item.id, cut, prompt, ids[:block_size]))
    return examples
