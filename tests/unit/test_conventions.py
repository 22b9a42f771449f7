"""The conventions users bring from other tools: the SDK's environment variables, one spelling of
a model path, refusals that name the differing setting."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from blackbox_mia.cli import app
from blackbox_mia.backends.api.kind import ApiTarget
from blackbox_mia.backends.registry import BackendSpec, read_spec
from blackbox_mia.cli.common import TargetOptions, local_model_path, normalized_spec
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.emulator.listen import check_bindable
from blackbox_mia.io import config_mismatch
from blackbox_mia.types import BlackboxMIAError

runner = CliRunner()
NO_ENV = {"OPENAI_BASE_URL": None, "OPENAI_API_KEY": None}


def invoke(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env={**NO_ENV, **(env or {})}, catch_exceptions=False)


# -- OPENAI_BASE_URL / OPENAI_API_KEY ---------------------------------------------------------


def test_base_url_from_the_environment_only_without_local(tmp_path):
    env = {"OPENAI_BASE_URL": "https://api.example.com/v1"}
    assert TargetOptions(model="m").target_spec(env) == BackendSpec("api", ApiTarget("m", "https://api.example.com/v1"))
    assert TargetOptions(model="m", base_url="http://127.0.0.1:9/v1").target_spec(env) == BackendSpec(
        "api", ApiTarget("m", "http://127.0.0.1:9/v1"))
    assert TargetOptions(local="gpt2").target_spec(env) == BackendSpec("local", "gpt2")  # --local wins over the env
    assert TargetOptions(spec="api:m@x@http://h:1/v1?top_n=5").target_spec(env) == read_spec("api:m@x@http://h:1/v1?top_n=5")
    with pytest.raises(BlackboxMIAError, match="OPENAI_BASE_URL needs --model"):
        TargetOptions().target_spec(env)
    with pytest.raises(BlackboxMIAError, match="OPENAI_BASE_URL must start with http"):
        TargetOptions(model="m").target_spec({"OPENAI_BASE_URL": "api.example.com/v1"})
    with pytest.raises(BlackboxMIAError, match="choose the target.*OPENAI_BASE_URL"):
        TargetOptions(model="m").target_spec({})
    with pytest.raises(BlackboxMIAError, match="choose one target"):
        TargetOptions(local="gpt2", base_url="http://127.0.0.1:9/v1", model="m").target_spec({})
    with pytest.raises(BlackboxMIAError, match="choose one target"):
        TargetOptions(local="gpt2", spec="local:gpt2").target_spec({})


def test_probe_takes_endpoint_and_key_from_the_sdk_variables(tiny_model_dir, tmp_path):
    key = "sk-test-ENV-1717"
    with serve_in_background(ServerConfig(str(tiny_model_dir), api_key=key, echo=False)) as url:
        args = ["probe", "Tom has 3 red apples.", "--model", tiny_model_dir, "--tokenizer", tiny_model_dir, "--json"]
        result = invoke(*args, "--cache-dir", tmp_path / "cache", env={"OPENAI_BASE_URL": url, "OPENAI_API_KEY": key})
        assert result.exit_code == 0, result.output
        record = json.loads(result.stdout.strip().splitlines()[-1])
        assert record["usage"]["requests"] > 0 and "".join(t["token"] for t in record["tokens"]) == "Tom has 3 red apples."
        refused = invoke(*args, "--cache-dir", tmp_path / "other", env={"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-wrong"})
    assert refused.exit_code == 2 and "401" in refused.output and key not in result.output + refused.output


def test_help_names_the_environment_variables():
    text = " ".join(invoke("score", "--help", env={"COLUMNS": "200"}).output.split())
    assert "$OPENAI_BASE_URL when no --local is given" in text and "OPENAI_API_KEY" in text


# -- model paths, one spelling; refusals name the setting --------------------------------------


def test_local_paths_are_normalised(tmp_path, monkeypatch):
    (tmp_path / "cache" / "canary" / "x").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    for typed in ("cache/canary/x/", "./cache/canary/x", "cache//canary/x"):
        assert local_model_path(typed) == "cache/canary/x"
        assert TargetOptions(local=typed).target_spec({}) == BackendSpec("local", "cache/canary/x")
        assert normalized_spec(typed) == normalized_spec(f"local:{typed}") == BackendSpec("local", "cache/canary/x")
    assert local_model_path("openai-community/gpt2") == "openai-community/gpt2"  # a hub name as given
    assert normalized_spec("api:m@http://127.0.0.1:9/v1/").target == ApiTarget("m", "http://127.0.0.1:9/v1/")


def test_score_resumes_whatever_the_spelling_of_the_model_path(tiny_model_dir, tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"t{i}", "text": f"Question: Tom has {i} apples."}) + "\n" for i in range(3)))
    out = tmp_path / "scores.jsonl"
    first = invoke("score", items, "--local", tiny_model_dir, "--scorers", "loss", "--out", out)
    assert first.exit_code == 0, first.output
    again = invoke("score", items, "--local", f"{tiny_model_dir}/", "--scorers", "loss", "--out", out)
    assert again.exit_code == 0, again.output
    assert len(out.read_text().splitlines()) == 3
    config = json.loads((tmp_path / "scores.jsonl.config.json").read_text())
    assert config["backends"]["target"]["model"] == str(tiny_model_dir)


def test_config_mismatch_names_the_first_differing_setting():
    old = {"backends": {"target": {"model": "a", "dtype": "auto"}}, "scorers": {"loss": {}}, "ks": [1, 2]}
    assert config_mismatch(old, json.loads(json.dumps(old))) is None
    assert config_mismatch({"ks": (1, 2), "x": 1}, {"ks": [1, 2], "x": 1.0}) is None  # as read back from JSON
    new = {"backends": {"target": {"model": "b", "dtype": "float32"}}, "scorers": {"loss": {}}, "ks": [1, 2]}
    assert config_mismatch(old, new) == "backends.target.dtype: 'auto' before, 'float32' now"
    assert config_mismatch(old, {**old, "ks": [1, 3]}) == "ks[1]: 2 before, 3 now"
    assert config_mismatch(old, {**old, "ks": [1]}) == "ks: [1, 2] before, [1] now"
    assert config_mismatch(old, {**old, "seed": 0}) == "seed: absent before, 0 now"
    assert config_mismatch(old, {"backends": old["backends"], "ks": [1, 2]}) == "scorers: {'loss': {}} before, absent now"
    assert config_mismatch([1], {"a": 1}) == "configuration: [1] before, {'a': 1} now"


# -- bbmia serve on a busy port ---------------------------------------------------------------


@pytest.fixture()
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_on_a_busy_port_is_one_clear_line_before_the_model_loads(busy_port):
    result = invoke("serve", "--model", "/nonexistent/model", "--port", busy_port)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip() == (
        f"error: cannot listen on 127.0.0.1:{busy_port}: the port is in use (another server?); "
        "choose another port, or port 0 for a free one"
    )


def test_a_busy_port_found_at_bind_time_says_the_same(tiny_model_dir, busy_port):
    in_use = f"cannot listen on 127.0.0.1:{busy_port}: the port is in use"
    with pytest.raises(BlackboxMIAError, match=in_use), serve_in_background(ServerConfig(str(tiny_model_dir), port=busy_port)):
        pass
    check_bindable("127.0.0.1", 0)  # port 0 always passes
    with pytest.raises(BlackboxMIAError, match="unknown host"):
        check_bindable("no-such-host.invalid", 8000)


# -- the demo's black-box stage is paid once --------------------------------------------------


def test_demo_blackbox_stage_is_paid_once_and_its_port_is_stable(tiny_model_dir, tmp_path, busy_port):
    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.cli.demo import blackbox_agreement, demo_server
    from blackbox_mia.datasets import Item

    local = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu"))
    items = [Item(id=f"t{i}", text=f"Question: Tom has {i} red apples.", label=i % 2) for i in range(4)]
    with socket.socket() as probe:  # a port free now, standing in for the demo's fixed one
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    first = blackbox_agreement(tiny_model_dir, local, items, "raw", False, tmp_path / "cache", False, port=port)
    again = blackbox_agreement(tiny_model_dir, local, items, "raw", False, tmp_path / "cache", False, port=port)
    assert first["requests"] > 0 and again["requests"] == 0  # a rerun pays nothing
    assert again["auc"] == first["auc"] and again["max_abs_diff_nats"] == first["max_abs_diff_nats"]
    said = []
    with demo_server(tiny_model_dir, local, "raw", False, busy_port, said.append) as url:
        assert url.startswith("http://127.0.0.1:") and url != f"http://127.0.0.1:{busy_port}/v1"
    assert said == [(f"cannot listen on 127.0.0.1:{busy_port}: the port is in use (another server?); choose another "
                    f"port, or port 0 for a free one; serving on a free port instead (black-box answers cached for "
                    f"port {busy_port} are not reused)")]
    local.close()
