"""Per-backend typed options (issue 28, item 5): a spec's ``?key=value`` query read into its kind's
options dataclass (types, ranges, unknown keys naming the valid ones), flags and query keys that
fill the same options (and disagree loudly), and backends built from a query that behave as
those built from flags or options objects."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from blackbox_mia.backends import ApiOptions, LocalOptions, build_backend, options_from_query
from blackbox_mia.backends.base import Backend
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.backends.options import KINDS, KindOptions, register_backend, setting
from blackbox_mia.backends.registry import read_spec, split_query
from blackbox_mia.cli.common import TargetOptions, build_backends, build_from_flags, normalized_spec
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.types import BlackboxMIAError

from ..conftest import gsm8k_questions
from .test_cli import assert_one_line_error, invoke

LOCAL_KEYS = "engine, device, dtype, batch_tokens, threads, max_memory_gb"


# -- the query parser ---------------------------------------------------------------------------


def test_query_values_take_their_fields_types():
    assert options_from_query("local", "device=cuda&dtype=bfloat16&batch_tokens=4096&max_memory_gb=1.5") == LocalOptions(
        device="cuda", dtype="bfloat16", batch_tokens=4096, max_memory_gb=1.5)
    api = options_from_query("api", "tokenizer=gpt2&epsilon=0.25&top_n=5&reprobe=yes&price=2.5,10&cache_dir=/tmp/c%26d")
    assert (api.tokenizer, api.epsilon, api.top_n, api.reprobe) == ("gpt2", 0.25, 5, True)
    assert api.price == (2.5, 10.0) and api.cache_dir == Path("/tmp/c&d")  # percent-decoded, a Path
    assert type(api.top_n) is int and type(api.epsilon) is float
    assert options_from_query("api", "allow_chat_conditional=false").allow_chat_conditional is False
    assert options_from_query("local", "") == LocalOptions()  # no query: the defaults
    assert options_from_query("local", "dtype=a+b").dtype == "a+b"  # not form data: + stays +


@pytest.mark.parametrize(("kind", "query", "message"), [
    ("local", "batch_tokens=0", "local: option batch_tokens must be an integer >= 1, got 0"),
    ("local", "threads=-1", "local: option threads must be an integer >= 1, got -1"),
    ("local", "max_memory_gb=0", "local: option max_memory_gb must be a finite number > 0, got 0"),
    ("api", "epsilon=nan", "api: option epsilon must be a finite number > 0, got nan"),
    ("api", "context=1", "api: option context must be an integer >= 2, got 1"),
    ("api", "rpm=inf", "api: option rpm must be a finite number > 0, got inf"),
    ("api", "price=1,-2", "api: option price must be a finite number >= 0, got 1,-2"),
    ("local", "batch_tokens=2.5", "local: option batch_tokens='2.5' must be an integer"),
    ("api", "epsilon=small", "api: option epsilon='small' must be a number"),
    ("api", "reprobe=maybe", "api: option reprobe='maybe' must be true or false"),
    ("api", "price=2.5", "api: option price='2.5' must be 2 comma-separated numbers"),
    ("local", "dtype", "local: spec option 'dtype' is not key=value"),
    ("local", "dtype=", "local: spec option 'dtype=' is not key=value"),
    ("local", "dtype=float32&dtype=float16", "local: spec option 'dtype' is given twice"),
])
def test_bad_query_values_are_refused_naming_the_key_and_value(kind, query, message):
    with pytest.raises(BlackboxMIAError) as err:
        options_from_query(kind, query)
    assert str(err.value).startswith(message), str(err.value)


def test_unknown_keys_name_the_valid_ones():
    with pytest.raises(BlackboxMIAError) as err:
        options_from_query("local", "devcie=cpu")
    assert str(err.value) == f"unknown local: spec option 'devcie'; valid: {LOCAL_KEYS}"
    with pytest.raises(BlackboxMIAError, match="unknown api: spec option 'device'; valid: tokenizer, endpoint"):
        options_from_query("api", "device=cpu")  # another kind's key
    for secret_or_derived in ("api_key", "refine_for"):
        with pytest.raises(BlackboxMIAError, match=f"api: {secret_or_derived} cannot be set in a spec"):
            options_from_query("api", f"{secret_or_derived}=x")
    with pytest.raises(BlackboxMIAError, match="unknown backend kind 'onnx'"):
        options_from_query("onnx", "")


def test_options_objects_check_their_ranges_too():
    with pytest.raises(BlackboxMIAError, match="epsilon must be a finite number > 0, got 0"):
        ApiOptions(epsilon=0.0)
    with pytest.raises(BlackboxMIAError, match="batch_tokens must be an integer >= 1, got 0"):
        LocalOptions(batch_tokens=0)


def test_an_options_class_with_the_old_ranges_table_is_refused():
    with pytest.raises(TypeError, match="OldOptions.ranges: give each field its range with setting"):
        @dataclass(frozen=True)
        class OldOptions(KindOptions):
            ranges = {"width": {"at_least": 1}}
            width: int = 3


def test_options_defaults_are_the_backends_own():
    """One definition of each default: the options' defaults are those of the configurations
    they fill."""
    from blackbox_mia.backends.api.http.config import ApiConfig
    from blackbox_mia.backends.api.tracker.config import TrackerConfig

    local, api = LocalOptions(), ApiOptions()
    assert (local.dtype, local.batch_tokens, local.device) == ("auto", None, None)
    assert (local.dtype, local.batch_tokens) == (LocalConfig.dtype, LocalConfig.max_batch_tokens)
    tracker, config = TrackerConfig(), ApiConfig("http://127.0.0.1:9/v1", "m")
    assert (api.strategy, api.epsilon, api.top_n) == (tracker.strategy, tracker.epsilon, tracker.max_top_n) == ("auto", 0.01, 100)
    assert (api.endpoint, api.concurrency, api.timeout_s, api.max_retries) == (
        config.endpoint, config.concurrency, config.timeout_s, config.max_retries) == ("completions", 16, 60.0, 6)


# -- specs, flags and options objects -----------------------------------------------------------


def test_split_query_and_normalized_spec_keep_the_settings(tmp_path, monkeypatch):
    assert split_query("gpt2?device=cpu&dtype=float32") == ("gpt2", "device=cpu&dtype=float32")
    assert split_query("m@http://h:1/v1?tokenizer=gpt2") == ("m@http://h:1/v1", "tokenizer=gpt2")
    assert split_query("gpt2") == ("gpt2", "")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    read = normalized_spec("local:./model/?dtype=float32")
    assert (read.kind, read.target, dict(read.query.values), dict(read.query.texts)) == (
        "local", "model", {"dtype": "float32"}, {"dtype": "float32"})
    assert TargetOptions(local="./model/?dtype=float32").target_spec({}) == read
    assert TargetOptions(local="./model/?dtype=float32").local_model == "./model/"  # a canary's manifest is found
    assert TargetOptions(base_url="http://127.0.0.1:9/v1", model="m").local_model is None


def test_a_flag_and_a_query_key_that_disagree_are_an_error_naming_both(tiny_model_dir):
    flags = TargetOptions(local=f"{tiny_model_dir}?dtype=float32", dtype="bfloat16")
    with pytest.raises(BlackboxMIAError) as err:
        build_backends(flags, [])
    assert str(err.value) == "--dtype 'bfloat16' and the local: spec's ?dtype=float32 disagree: give one"
    with pytest.raises(BlackboxMIAError, match="--context-tokens 64 and the api: spec's [?]context=32 disagree"):
        build_from_flags(read_spec("api:m@http://127.0.0.1:9/v1?context=32"), TargetOptions(context=64))
    with pytest.raises(BlackboxMIAError, match=r"LocalOptions.dtype 'float16' and the local: spec's \?dtype=float32"):
        build_backend(f"local:{tiny_model_dir}?dtype=float32", LocalOptions(dtype="float16"))


def test_a_setting_given_both_ways_alike_is_accepted(tiny_model_dir):
    backend = build_from_flags(read_spec(f"local:{tiny_model_dir}?dtype=float32&threads=1"),
                               TargetOptions(dtype="float32", batch_tokens=64))
    assert (backend.config.dtype, backend.config.threads, backend.config.max_batch_tokens) == ("float32", 1, 64)
    backend.close()


def test_options_of_another_kind_are_refused(tiny_model_dir):
    with pytest.raises(BlackboxMIAError, match="local: specs take LocalOptions, got ApiOptions"):
        build_backend(f"local:{tiny_model_dir}", ApiOptions(tokenizer="gpt2"))


def test_the_vllm_engine_refuses_the_torch_engines_settings(tiny_model_dir):
    with pytest.raises(BlackboxMIAError, match="the vllm engine does not read device, threads"):
        build_backend(f"local:{tiny_model_dir}?engine=vllm&device=cpu&threads=2")


def test_a_registered_kind_builds_from_its_spec_with_typed_options():
    @dataclass(frozen=True)
    class EchoOptions(KindOptions):
        width: int = setting(3, help="columns", at_least=1)
        label: str | None = setting(None, help="a label")

    built = []

    def build_echo(target: str, options: EchoOptions) -> Backend:
        built.append((target, options))
        return None  # type: ignore[return-value]  (build_backend returns what the builder built)

    try:
        assert register_backend("echo", EchoOptions, "echo:NAME")(build_echo) is build_echo
        build_backend("echo:thing?width=7&label=a%3Fb")
        assert built == [("thing", EchoOptions(width=7, label="a?b"))]
        with pytest.raises(BlackboxMIAError, match="unknown echo: spec option 'height'; valid: width, label"):
            build_backend("echo:thing?height=2")
        with pytest.raises(BlackboxMIAError, match="echo: option width must be an integer >= 1, got 0"):
            build_backend("echo:thing?width=0")
        with pytest.raises(BlackboxMIAError, match="echo:NAME"):
            build_backend("onnx:thing")  # the unknown-kind message lists every kind's form
    finally:
        KINDS.pop("echo", None)


# -- the same backend from a query, from flags, from options --------------------------------------


def test_local_backend_from_a_query_gives_the_flags_log_probs(tiny_model_dir):
    texts = [q[:80] for q in gsm8k_questions(3)]
    queried = build_backend(f"local:{tiny_model_dir}?dtype=float32&device=cpu&batch_tokens=96")
    flagged = build_backends(TargetOptions(local=str(tiny_model_dir), dtype="float32", device="cpu", batch_tokens=96), [])["target"]
    direct = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu", dtype="float32", max_batch_tokens=96))
    try:
        assert queried.config == flagged.config == direct.config
        assert queried.describe() == flagged.describe() == direct.describe()  # the configuration saved with results
        for a, b, c in zip(queried.logprobs(texts), flagged.logprobs(texts), direct.logprobs(texts)):
            np.testing.assert_array_equal(a.logprobs, c.logprobs)
            np.testing.assert_array_equal(b.logprobs, c.logprobs)
            assert a.token_ids.tolist() == c.token_ids.tolist()
    finally:
        for backend in (queried, flagged, direct):
            backend.close()


def test_api_backend_from_a_query_against_the_emulator(tiny_model_dir, tmp_path):
    texts = ["Tom has 3 red apples.", "Sara reads 12 pages a day."]
    with serve_in_background(ServerConfig(str(tiny_model_dir))) as url:
        spec = f"api:{tiny_model_dir}@{url}?tokenizer={tiny_model_dir}&epsilon=0.05&top_n=5&concurrency=4&cache_dir={tmp_path}"
        queried = build_backend(spec)
        flags = TargetOptions(base_url=url, model=str(tiny_model_dir), tokenizer=str(tiny_model_dir), epsilon=0.05,
                              concurrency=4, cache_dir=tmp_path, precision="token")
        with pytest.raises(BlackboxMIAError, match="--concurrency 4 and the api: spec's [?]concurrency=8 disagree"):
            build_from_flags(read_spec(f"api:{tiny_model_dir}@{url}?concurrency=8"), flags)
        flagged = build_from_flags(read_spec(f"api:{tiny_model_dir}@{url}?top_n=5"), flags)
        try:
            assert queried.tracker_config == flagged.tracker_config
            assert (queried.tracker_config.epsilon, queried.tracker_config.max_top_n) == (0.05, 5)
            assert queried.client.config.describe() == flagged.client.config.describe()
            assert queried.client.config.concurrency == 4 and queried.codec.name == flagged.codec.name
            got = queried.logprobs(texts)
            assert queried.describe() == flagged.describe()  # the configuration saved with results
            again = flagged.logprobs(texts)
        finally:
            queried.close()
            flagged.close()
    white = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu")).logprobs(texts)
    for g, a, w in zip(got, again, white):
        assert g.token_ids.tolist() == w.token_ids.tolist()
        np.testing.assert_array_equal(g.logprobs, a.logprobs)
        lower = g.logprobs if g.lower is None else g.lower
        upper = g.logprobs if g.upper is None else g.upper
        assert np.all(lower <= w.logprobs + 1e-3) and np.all(w.logprobs - 1e-3 <= upper)  # within its bounds


# -- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(("spec_query", "extra", "fragments"), [
    ("devcie=cpu", (), ("unknown local: spec option 'devcie'", f"valid: {LOCAL_KEYS}")),
    ("dtype=float32", ("--dtype", "float16"), ("--dtype 'float16'", "?dtype=float32", "disagree")),
    ("batch_tokens=0", (), ("local: option batch_tokens must be an integer >= 1, got 0",)),
])
def test_cli_spec_errors_are_one_line_exit_2(tiny_model_dir, tmp_path, spec_query, extra, fragments):
    result = invoke("score", "gsm8k", "--local", f"{tiny_model_dir}?{spec_query}", "--limit", 1, "--scorers", "loss",
                    "--out", tmp_path / "s.jsonl", *extra)
    assert_one_line_error(result, *fragments)
    assert not (tmp_path / "s.jsonl").exists()


def test_cli_ref_spec_with_an_unknown_key(tiny_model_dir, tmp_path):
    result = invoke("score", "gsm8k", "--local", tiny_model_dir, "--ref", "api:m@http://127.0.0.1:9/v1?tokeniser=gpt2",
                    "--limit", 1, "--scorers", "ref", "--cache-dir", tmp_path)
    assert_one_line_error(result, "unknown api: spec option 'tokeniser'", "valid: tokenizer, endpoint")


def test_cli_query_reaches_the_saved_configuration(tiny_model_dir, tmp_path):
    import json

    out = tmp_path / "scores.jsonl"
    result = invoke("score", "gsm8k", "--local", f"{tiny_model_dir}?dtype=float32&device=cpu", "--limit", 1,
                    "--scorers", "loss", "--out", out)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.with_name("scores.jsonl.config.json").read_text())["backends"]["target"]
    assert (saved["model"], saved["dtype"], saved["device"]) == (str(tiny_model_dir), "float32", "cpu")
    flagged = tmp_path / "flags.jsonl"
    assert invoke("score", "gsm8k", "--local", tiny_model_dir, "--dtype", "float32", "--device", "cpu", "--limit", 1,
                  "--scorers", "loss", "--out", flagged).exit_code == 0
    assert json.loads(flagged.with_name("flags.jsonl.config.json").read_text())["backends"]["target"] == saved
    assert flagged.read_text() == out.read_text()


def test_docs_list_every_kinds_keys():
    """docs/backends.md has one table row per query key of every registered kind."""
    from blackbox_mia.backends.options import query_keys

    text = (Path(__file__).parents[2] / "docs" / "backends.md").read_text(encoding="utf-8")
    for kind in KINDS.values():
        for key in query_keys(kind.options):
            assert f"| `{key}` |" in text, (kind.name, key)


def test_flags_and_specs_keep_the_saved_configuration_and_the_cache_keys(tiny_model_dir, tmp_path):
    """Issue 44: the target is handed to its kind as (kind, options), no spec text written and read
    again; what is saved with results and the cache keys are unchanged. The pinned values were
    printed by the code before that change for the same options."""
    from blackbox_mia.backends.api.capabilities import capabilities_path
    from blackbox_mia.backends.api.http.cache.keys import request_key
    from blackbox_mia.scorers import parse_scorers

    settings = dict(tokenizer=str(tiny_model_dir), epsilon=0.05, concurrency=4, context=64, cache_dir=tmp_path,
                    strategy="forced", rpm=600.0)
    flagged = TargetOptions(base_url="http://127.0.0.1:9/v1/", model="org/m@2", **settings)
    spec = TargetOptions(spec="api:org/m@2@http://127.0.0.1:9/v1/?concurrency=4", **{**settings, "concurrency": None})
    for options in (flagged, spec):
        backend = build_backends(options, parse_scorers("loss,min_k:k=10"), check_first=False)["target"]
        config, tracker = backend.client.config, backend.tracker_config
        try:
            assert config.describe() == {
                "base_url": "http://127.0.0.1:9/v1", "concurrency": 4, "endpoint": "completions", "max_retries": 6,
                "model": "org/m@2", "rpm": 600.0, "timeout_s": 60.0, "tpm": None, "usd_per_1m_tokens": None}
            assert repr(tracker) == (
                "TrackerConfig(strategy='forced', epsilon=0.05, max_bias=100.0, verify_flips=True, verify_repeats=2, "
                "verify_every=32, refine_for=(10.0, 100.0), chain_tokens=4, context=64, pending=None, max_top_n=100)")
            key = request_key(config.base_url, config.model, "completions", {"prompt": [1, 2, 3], "max_tokens": 1,
                                                                             "logprobs": 5})
            assert key == "bae7cf2bf019b4a4baff87f08361cd9ec355414cb292f15133cf7fb6ce68549f"
            path = capabilities_path(tmp_path, config.base_url, config.model, config.endpoint, tracker.epsilon,
                                     tracker.max_bias)
            assert path.name == "72caaa22e14044736b40ef3b.json"  # PROBE_VERSION 14 (issue 52: shape_variation, margin 3)
        finally:
            backend.close()


def test_the_docs_tables_agree_with_the_one_home_of_each_setting():
    """docs/backends.md lists every query key of each kind with the flag and the range its
    options field declares (``setting``): a range or flag changed in the field and not in the
    docs fails here."""
    import dataclasses
    import re

    from blackbox_mia.backends.options import flag_name, query_keys
    from blackbox_mia.config import NOT_AN_OPTION, bounds_of

    text = (Path(__file__).resolve().parents[2] / "docs" / "backends.md").read_text(encoding="utf-8")
    rows = {m[1]: (m[2], m[3]) for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|", text, re.M)}
    for kind in ("local", "api"):
        fields = {f.name: f for f in dataclasses.fields(KINDS[kind].options)}
        for key in query_keys(KINDS[kind].options):
            flag, unit = rows[key]
            f = fields[key]
            option = not NOT_AN_OPTION.items() <= f.metadata.items()
            assert flag.startswith(f"`{flag_name(f)}`" if option else "(query only)"), (key, flag)
            signs = {"above": ">", "at_least": "≥", "below": "<", "at_most": "≤"}
            for bound, value in bounds_of(f).items():
                if bound in signs:
                    assert f"{signs[bound]} {value:g}" in unit, (key, unit, bound, value)
