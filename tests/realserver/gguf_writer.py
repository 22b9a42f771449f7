"""Write a Hugging Face GPT-2 model directory as an f32 GGUF that llama.cpp loads as `gpt2`.

Runs in the llama venv (it needs `gguf`, `numpy`, `safetensors`; no torch):

    python tests/realserver/gguf_writer.py MODEL_DIR OUT.gguf [--name NAME]

MODEL_DIR is what `blackbox_mia.canary.model.save_model_dir` writes: config.json,
model.safetensors, tokenizer.json (a byte-level BPE). The GGUF carries the model's own vocab
and merges with pre-tokenizer "gpt-2" (GPT-2's regex, which `train_tokenizer`'s
`ByteLevel(add_prefix_space=False)` uses), context = n_positions, and no BOS added, so the
server tokenizes and scores a text exactly as `LocalBackend(LocalConfig(path, bos=False))`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

# HF GPT2LMHeadModel parameter (without ".weight"/".bias") -> GGUF tensor name; "{i}" = block
_BLOCK = {
    "ln_1": "attn_norm",
    "attn.c_attn": "attn_qkv",
    "attn.c_proj": "attn_output",
    "ln_2": "ffn_norm",
    "mlp.c_fc": "ffn_up",
    "mlp.c_proj": "ffn_down",
}
_TOP = {"wte": "token_embd", "wpe": "position_embd", "ln_f": "output_norm"}
# GPT-2's Conv1D stores weights as (in, out); GGUF wants (out, in) in numpy order like nn.Linear
_CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def _gguf_name(hf: str) -> tuple[str, bool] | None:
    """(GGUF name, transpose?) of a HF tensor name, None for buffers to drop."""
    name = hf.removeprefix("transformer.")
    if name.startswith("lm_head."):
        return "output." + name.split(".")[-1], False
    stem, kind = name.rsplit(".", 1)
    if stem in _TOP:
        return f"{_TOP[stem]}.{kind}", False
    if stem.startswith("h."):
        _, i, rest = stem.split(".", 2)
        if rest in _BLOCK:
            return f"blk.{i}.{_BLOCK[rest]}.{kind}", kind == "weight" and rest in _CONV1D
    if stem in ("attn", "attn.masked") or stem.endswith((".attn", ".attn.masked")):
        return None  # causal-mask buffers of old checkpoints
    raise ValueError(f"unexpected tensor {hf!r}")


def _load_tensors(model_dir: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}")
    tensors: dict[str, np.ndarray] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return tensors


def _vocab(model_dir: Path, vocab_size: int):
    """(tokens, token types, merges, special ids) from tokenizer.json."""
    import gguf

    tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    model = tok["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"not a BPE tokenizer: {model.get('type')}")
    by_id = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    if sorted(by_id) != list(range(len(by_id))):
        raise ValueError("token ids are not contiguous")
    tokens, types = [], []
    for i in range(vocab_size):  # the embedding may be padded beyond the tokenizer
        if i in by_id:
            tokens.append(by_id[i])
            if i in added:
                types.append(gguf.TokenType.CONTROL if added[i].get("special") else gguf.TokenType.USER_DEFINED)
            else:
                types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges


def convert(model_dir: Path, out: Path, name: str | None = None) -> Path:
    import gguf

    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "gpt2":
        raise ValueError(f"not a GPT-2 model: {config.get('model_type')}")
    n_embd, n_layer = config["n_embd"], config["n_layer"]
    n_ctx = config["n_positions"]
    tensors = _load_tensors(model_dir)
    vocab_size = tensors["transformer.wte.weight"].shape[0]
    tokens, types, merges = _vocab(model_dir, vocab_size)

    w = gguf.GGUFWriter(str(out), "gpt2")
    w.add_name(name or model_dir.name)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(config.get("n_inner") or 4 * n_embd)
    w.add_block_count(n_layer)
    w.add_head_count(config["n_head"])
    w.add_layer_norm_eps(config.get("layer_norm_epsilon", 1e-5))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for key, add in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id)):
        if config.get(key) is not None:
            add(config[key])
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)

    for hf, data in tensors.items():
        mapped = _gguf_name(hf)
        if mapped is None:
            continue
        gname, transpose = mapped
        data = np.ascontiguousarray((data.T if transpose else data).astype(np.float32))
        w.add_tensor(gname, data)
    if "lm_head.weight" not in tensors:  # tied: llama.cpp falls back to token_embd, but be explicit
        w.add_tensor("output.weight", np.ascontiguousarray(tensors["transformer.wte.weight"].astype(np.float32)))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--name")
    a = p.parse_args(argv)
    convert(a.model_dir, a.out, a.name)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
