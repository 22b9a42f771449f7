"""Response bodies in OpenAI's shapes: the envelope, legacy completions ``logprobs`` and chat
``logprobs.content`` entries. Every log-prob is in nats and JSON-safe (:func:`finite`)."""

from __future__ import annotations

import codecs
import time
import uuid
from collections.abc import Sequence

from .names import TokenNames
from .sampling import Step, finite

# (log p(token | prefix), top-n ((id, log-prob), ...)) for one echoed prompt position
PromptPosition = tuple[float, tuple[tuple[int, float], ...]]


def envelope(kind: str, model: str, choice: dict, n_prompt: int, n_completion: int) -> dict:
    """The response object around one ``choice``.

    Args:
        kind: ``"text_completion"`` or ``"chat.completion"`` (the ``object`` field; it picks the id prefix).
        model: the served model name.
        choice: ``choices[0]``.
        n_prompt, n_completion: token counts for ``usage``.
    """
    prefix = "cmpl" if kind == "text_completion" else "chatcmpl"
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_completion,
                  "total_tokens": n_prompt + n_completion},
    }


def legacy_logprobs(names: TokenNames, echoed: Sequence[int], added: int, positions: Sequence[PromptPosition],
                    steps: Sequence[Step]) -> dict:
    """OpenAI legacy ``logprobs``: ``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``.

    Args:
        names: token names.
        echoed: the echoed prompt ids (empty without echo); the first has no log-prob (null).
        added: how many of the first echoed tokens the server prepended (a BOS): listed, but
            they take no room in the text (offset width 0).
        positions: for echoed[1:], as :meth:`LocalBackend.prompt_top_logprobs` gives them.
        steps: the generated positions.

    In a top list, tokens sharing a name (``""`` for partial characters with
    ``empty_partial_names``) keep the highest value, and the sampled/actual token is listed
    beside the top n when it is not among them (n + 1 entries, as vLLM).
    """
    rows: list[tuple[int, float | None, tuple | None]] = []
    if echoed:
        rows.append((echoed[0], None, None))
        rows += [(tok, lp, top) for tok, (lp, top) in zip(echoed[1:], positions)]
    rows += [(s.token, s.logprob, s.top) for s in steps]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    tokens, token_logprobs, top_logprobs, offsets, offset = [], [], [], [], 0
    for j, (tok, lp, top) in enumerate(rows):
        name, raw = names(tok)
        tokens.append(name)
        offsets.append(offset)
        if j >= added:
            offset += len(decoder.decode(raw))
        token_logprobs.append(None if lp is None else finite(lp))
        if top is None:
            top_logprobs.append(None)
            continue
        listed: dict[str, float] = {}
        for i, v in top:  # best first: setdefault keeps the highest of colliding names
            listed.setdefault(names(i)[0], finite(v))
        listed.setdefault(name, finite(lp))  # the sampled/actual token, when not in the top n
        top_logprobs.append(listed)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs,
            "text_offset": offsets}


def chat_entry(names: TokenNames, step: Step) -> dict:
    """One chat ``logprobs.content`` entry: ``token``, ``logprob``, exact ``bytes`` and the
    ``top_logprobs`` list (exactly the top n, best first)."""

    def item(token_id: int, lp: float) -> dict:
        name, raw = names(token_id)
        return {"token": name, "logprob": finite(lp), "bytes": list(raw)}

    return {**item(step.token, step.logprob), "top_logprobs": [item(i, v) for i, v in step.top]}
