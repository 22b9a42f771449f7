"""What a vLLM server itself can do: raw ``prompt_logprobs`` requests, no auditor in between.

Usage (a server already running, e.g. the recipe in docs/scale-out.md; run in the vLLM venv,
which has aiohttp, or the product's):
    python -m benchmarks.bench_vllm_raw --url http://127.0.0.1:8000 --model-dir DIR
        [--texts 200] [--server-pid PID]

The first ``--texts`` GSM8K test problems (as ``benchmarks.bench_vllm`` scores them) are cut,
by the model's own tokenizer, into windows of ``max-model-len - 1`` token ids (room for the one
generated token) starting every ``max-model-len - 2`` tokens, and each layout below sends every
window once: ``prompt_logprobs: 0``, ``max_tokens: 1``, ``logprobs: 20``, a one-entry
``logit_bias`` on the generated position (the auditor's request shape). Layouts (prompts per
request, requests in flight): (1, 4), (1, 16), (1, 64), (16, 4). Every answer must be HTTP 200
with one choice per prompt and one ``prompt_logprobs`` entry per prompt token.

Output: one line per layout: texts/s, windows/s, the client's CPU per window (ms) and, with
``--server-pid``, the CPU per window (ms) of each process of the server's tree by name (from
/proc: the API server ``python``, ``VLLM::EngineCore``, ``VLLM::Worker``). vLLM's CPU worker
spins while it waits, so its CPU tracks wall time, not work.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

from benchmarks.bench_vllm import DEFAULT_TEXTS, SERVED_NAME, gsm8k_texts

LAYOUTS = ((1, 4), (1, 16), (1, 64), (16, 4))  # (prompts per request, requests in flight)
CONTEXT = 128  # the default canary's max-model-len (tokens)


def windows(model_dir: Path, texts: list[str]) -> list[list[int]]:
    """Token-id windows of CONTEXT - 1 tokens, one every CONTEXT - 2 tokens of each text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    out = []
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        out += [ids[s : s + CONTEXT - 1] for s in range(0, max(1, len(ids) - 1), CONTEXT - 2)]
    return out


def tree_cpu(root: int | None) -> dict[str, float]:
    """CPU seconds (user + system) of ``root`` and its descendants, summed by process name."""
    if root is None:
        return {}
    tick, totals, todo = os.sysconf("SC_CLK_TCK"), {}, [root]
    while todo:
        pid = todo.pop()
        stat = Path(f"/proc/{pid}/stat").read_text()
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        totals[name] = totals.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        for task in os.listdir(f"/proc/{pid}/task"):
            todo += [int(k) for k in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return totals


async def send_all(url: str, wins: list[list[int]], per_request: int, in_flight: int) -> None:
    """Every window once, ``per_request`` prompts per request, ``in_flight`` requests at once.

    Raises:
        AssertionError: an answer that is not HTTP 200 with one choice per prompt and one
            ``prompt_logprobs`` entry per prompt token.
    """
    import aiohttp

    gate = asyncio.Semaphore(in_flight)
    async with aiohttp.ClientSession() as session:

        async def one(group: list[list[int]]) -> None:
            body = {"model": SERVED_NAME, "prompt": group if per_request > 1 else group[0], "max_tokens": 1,
                    "temperature": 0, "logprobs": 20, "prompt_logprobs": 0,
                    "logit_bias": {str(group[0][-1]): 100}}  # fmt: skip
            async with gate, session.post(f"{url}/v1/completions", json=body) as answer:
                got = await answer.json()
            assert answer.status == 200 and len(got["choices"]) == len(group), got
            for choice in got["choices"]:
                assert len(choice["prompt_logprobs"]) == len(group[choice["index"]]), choice

        await asyncio.gather(*(one(wins[i : i + per_request]) for i in range(0, len(wins), per_request)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the server's root, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model-dir", type=Path, required=True, help="the served model's directory")
    parser.add_argument("--texts", type=int, default=DEFAULT_TEXTS)
    parser.add_argument("--server-pid", type=int, help="the API server's process id (CPU per process)")
    args = parser.parse_args()
    texts = gsm8k_texts(args.texts)
    wins = windows(args.model_dir, texts)
    asyncio.run(send_all(args.url, wins[:64], 1, 4))  # warm-up
    for per_request, in_flight in LAYOUTS:
        server, start, client = tree_cpu(args.server_pid), time.perf_counter(), time.process_time()
        asyncio.run(send_all(args.url, wins, per_request, in_flight))
        wall, client = time.perf_counter() - start, time.process_time() - client
        spent = {k: round((v - server.get(k, 0.0)) * 1000 / len(wins), 2) for k, v in tree_cpu(args.server_pid).items()}
        print(f"{per_request} per request, {in_flight} in flight: {len(texts) / wall:.1f} texts/s, "
              f"{len(wins) / wall:.1f} windows/s ({len(wins)} windows), client CPU "
              f"{client * 1000 / len(wins):.2f} ms/window, server CPU ms/window {spent}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
