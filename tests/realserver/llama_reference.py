"""llama.cpp's own white-box log-probs of a GGUF: the full-sequence evaluation
(`Llama(..., logits_all=True).eval(ids)`, the whole sequence in one batch), the reference the
tracker's values through a llama.cpp server are checked against.

Runs in the llama venv (it needs `llama_cpp` and `numpy`), reading JSON on stdin, writing JSON
on stdout:

    python tests/realserver/llama_reference.py MODEL.gguf N_CTX < request.json

The request: `{"sequences": [[id, ...], ...], "prompts": [[text, target_id], ...], "texts": [text, ...]}`
(each key optional). The answer: `{"sequences": [[lp_1, ...], ...]}` (the log-prob in nats of
each token after the first, given the tokens before it), `"prompts": [lp, ...]` (the log-prob of
`target_id` right after `text` tokenized as llama.cpp does, special tokens parsed: a rendered chat
prompt), and `"texts": [[id, ...], ...]` (each text tokenized as the server does, no BOS).
"""

from __future__ import annotations

import json
import sys

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    top = logits.max(axis=-1, keepdims=True)
    return logits - (top + np.log(np.exp(logits - top).sum(axis=-1, keepdims=True)))


def main(argv: list[str]) -> int:
    from llama_cpp import Llama

    gguf, n_ctx = argv[0], int(argv[1])
    request = json.load(sys.stdin)
    llm = Llama(gguf, n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, verbose=False)

    def evaluate(ids: list[int]) -> np.ndarray:
        llm.reset()
        llm.eval(ids)
        return log_softmax(np.asarray(llm.scores[: len(ids)], dtype=np.float64))

    answer = {"sequences": [], "prompts": [], "texts": []}
    for ids in request.get("sequences", []):
        rows = evaluate(ids)
        answer["sequences"].append([float(rows[k - 1, ids[k]]) for k in range(1, len(ids))])
    for text, target in request.get("prompts", []):
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        answer["prompts"].append(float(evaluate(ids)[-1, target]))
    for text in request.get("texts", []):
        answer["texts"].append(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
