"""The spend guard (:mod:`blackbox_mia.spend.guard`) in every command that can send requests, and
in the library's audits: a run estimated above it is refused before its first request unless
``--yes`` / ``yes=True`` (or a cap) is given; the estimate it judges is ``--dry-run``'s, and a
confirmed run sends no more requests than that estimate. The server's POST requests are counted by
a fault-free proxy (``bbmia serve`` behind it, as in ``test_dry_run``)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.cli import app
from blackbox_mia.spend import guard
from blackbox_mia.spend.guard import SpendRefused

from .test_dry_run import bbmia, files, probe_requests, proxy  # noqa: F401  (fixtures)

HONEST = 0.9  # a confirmed run sends at least this share of the requests its estimate counted


def unlearning(proxy, model_dir, cache, *args):  # noqa: F811
    """``bbmia unlearning`` with --before and --after both the served model; ``(result, POSTs sent)``."""
    before = proxy.stats.requests
    spec = f"api:{model_dir}@{proxy.base_url}"
    result = CliRunner().invoke(app, ["unlearning", *map(str, args), "--before", spec, "--after", spec, "--tokenizer",
                                      str(model_dir), "--cache-dir", str(cache)],
                                env={"OPENAI_BASE_URL": None, "OPENAI_API_KEY": "none"}, catch_exceptions=False)
    return result, proxy.stats.requests - before


COMMANDS = {
    "eval": ["eval", "{labelled}", "--scorers", "loss,min_k", "--n-boot", "0", "--out", "{tmp}/eval"],
    "eval-text-only": ["eval", "{labelled}", "--methods", "text-only", "--n-boot", "0", "--out", "{tmp}/eval"],
    "sweep": ["sweep", "{labelled}", "--calibration", "{known}", "--no-control", "--out", "{tmp}/sweep"],
    "documents": ["documents", "{docs}", "--calibration", "{calibration}", "--chunk-words", "8",
                  "--out", "{tmp}/documents"],
    "exchangeability": ["exchangeability", "{labelled}", "--shards", "2", "--permutations", "2",
                        "--out", "{tmp}/exchangeability"],
    "memorize": ["memorize", "{labelled}", "--prompt-lengths", "3", "--reference-tokens", "3", "--out", "{tmp}/memorize"],
    "unlearning": ["{labelled}", "--prompt-words", "2", "--samples", "2", "--max-new-tokens", "4",
                   "--out", "{tmp}/unlearning"],
}


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    """Labelled calibration texts for the sweep, none of them in ``files["labelled"]``."""
    path = tmp_path_factory.mktemp("known") / "known.jsonl"
    texts = ["Ann bakes 6 pies for the fair.", "Bo reads 7 books a month.", "Cy plants 8 trees in a row.",
             "Di swims 9 laps each morning."]
    path.write_text("".join(json.dumps({"id": f"k{i}", "text": t, "label": int(i < 2)}) + "\n" for i, t in enumerate(texts)))
    return path


def run(name, proxy, model_dir, cache, args):  # noqa: F811
    return (unlearning if name == "unlearning" else bbmia)(proxy, model_dir, cache, *args)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_run_above_the_guard_is_refused_before_its_first_request_and_its_estimate_is_honest(
        name, proxy, tiny_model_dir, files, known, tmp_path, monkeypatch):  # noqa: F811
    cache = tmp_path / "cache"
    args = [a.format(tmp=tmp_path, known=known, **files) for a in COMMANDS[name]]
    estimated, sent = run(name, proxy, tiny_model_dir, cache, [*args, "--dry-run", "--json"])
    assert estimated.exit_code == 0, estimated.output
    # (an empty cache: the capability probe ran, except for memorize's generation only; cached from now on)
    requests = json.loads(estimated.stdout.strip().splitlines()[-1])["estimate"]["total"]["all"]["requests"]
    assert requests > 0
    monkeypatch.setattr(guard, "GUARD_REQUESTS", requests - 1)  # this small run now counts as a big one
    refused, sent = run(name, proxy, tiny_model_dir, cache, args)
    assert refused.exit_code == 2 and sent == 0, refused.output
    assert f"refusing to start: this run is estimated at {requests:,} requests (unpriced model)" in refused.output
    assert "--max-cost" in refused.output and "--yes" in refused.output and "Traceback" not in refused.output
    assert "max_cost=" not in refused.output  # the flags, not the Python arguments
    assert not (tmp_path / name.split("-")[0]).exists()  # nothing written
    confirmed, sent = run(name, proxy, tiny_model_dir, cache, [*args, "--yes", "--json"])
    assert confirmed.exit_code == 0, confirmed.output
    assert 0 < sent <= requests, f"{name}: {sent} requests sent, {requests} estimated"
    # and not loose: within 10% (measured: sent = estimate, or 1-3% under for sweep and documents);
    # unlearning's before and after are one model here, so the after scores come from the cache
    assert sent >= HONEST * requests / (2 if name == "unlearning" else 1), f"{name}: {sent} sent, {requests} estimated"
    usage = json.loads(confirmed.stdout.strip().splitlines()[-1])["usage"]["total"]
    assert usage["requests"] == sent  # the usage line counts what the server saw
    monkeypatch.setattr(guard, "GUARD_REQUESTS", requests)  # at the limit: runs without a flag, all cached
    again, sent = run(name, proxy, tiny_model_dir, cache, [*args, "--overwrite"])
    assert again.exit_code == 0 and sent == 0, again.output


def test_a_refused_run_on_an_empty_cache_sends_only_the_capability_probe(proxy, tiny_model_dir, files, known, tmp_path,
                                                                        monkeypatch):  # noqa: F811
    probe_only = probe_requests(proxy, tiny_model_dir, tmp_path / "probe-only")
    monkeypatch.setattr(guard, "GUARD_REQUESTS", 0)
    args = [a.format(tmp=tmp_path, known=known, **files) for a in COMMANDS["sweep"]]
    refused, sent = bbmia(proxy, tiny_model_dir, tmp_path / "cache", *args)
    assert refused.exit_code == 2 and "refusing to start" in refused.output
    assert sent == probe_only > 0


def test_the_real_limit_refuses_an_exchangeability_test_of_400_items(proxy, tiny_model_dir, tmp_path):  # noqa: F811
    """No patched limit: 400 distinct items, each scored by the tracker (about 30 requests an
    item on this model), are estimated above 10,000 requests: refused before the first request, nothing sent."""
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"q{i}", "text": f"Item {i} has {i + 2} red apples and {i} pears."})
                             + "\n" for i in range(400)))
    cache = tmp_path / "cache"
    probe_requests(proxy, tiny_model_dir, cache)
    refused, sent = bbmia(proxy, tiny_model_dir, cache, "exchangeability", items, "--out", tmp_path / "out")
    assert refused.exit_code == 2 and sent == 0, refused.output[-2000:]
    line = next(line for line in refused.output.splitlines() if "refusing to start" in line)
    requests = int(line.split("estimated at ")[1].split(" requests")[0].replace(",", ""))
    assert requests > guard.GUARD_REQUESTS == 10_000
    assert not (tmp_path / "out").exists()


def test_the_library_audits_raise_the_typed_error_unless_yes(proxy, tiny_model_dir, files, known, tmp_path,
                                                            monkeypatch):  # noqa: F811
    from blackbox_mia.audits import EvalConfig, SweepConfig, prepare_eval, prepare_sweep, run_eval, run_sweep
    from blackbox_mia.audits.documents import DocumentsConfig, prepare_documents, run_documents
    from blackbox_mia.audits.exchangeability import ExchangeabilityConfig, prepare_exchangeability, run_exchangeability
    from blackbox_mia.audits.memorization import MemorizeConfig, prepare_memorize, run_memorize
    from blackbox_mia.audits.unlearning import UnlearningConfig, prepare_unlearning, run_unlearning

    cache = tmp_path / "cache"
    probe_requests(proxy, tiny_model_dir, cache)
    monkeypatch.setattr(guard, "GUARD_REQUESTS", 0)
    config = ApiConfig(base_url=proxy.base_url, model=str(tiny_model_dir), api_key="none")
    labelled = str(files["labelled"])
    with ApiBackend(config, str(tiny_model_dir), cache_dir=cache) as backend:
        backends = {"target": backend}
        audits = {
            "eval": lambda yes: run_eval(prepare_eval(EvalConfig(labelled, scorers=("loss",), n_boot=0)),
                                         backends, tmp_path / "eval", progress=False, yes=yes),
            "sweep": lambda yes: run_sweep(prepare_sweep(SweepConfig(labelled, calibration=str(known), control=False)),
                                           backends, tmp_path / "sweep", progress=False, yes=yes),
            "documents": lambda yes: run_documents(
                prepare_documents(DocumentsConfig(str(files["docs"]), str(files["calibration"]), "loss", chunk_words=8,
                                                  n_boot=0)), backends, tmp_path / "documents", progress=False, yes=yes),
            "exchangeability": lambda yes: run_exchangeability(
                prepare_exchangeability(ExchangeabilityConfig(labelled, shards=2, permutations=2)), backends,
                tmp_path / "exchangeability", progress=False, yes=yes),
            "memorize": lambda yes: run_memorize(prepare_memorize(MemorizeConfig(labelled, (3,), 3, n_boot=0)),
                                                 backend, tmp_path / "memorize", progress=False, yes=yes),
            "unlearning": lambda yes: run_unlearning(
                prepare_unlearning(UnlearningConfig(labelled, prompt_words=2, samples=2, max_new_tokens=4)),
                backend, backend, tmp_path / "unlearning", progress=False, yes=yes),
        }
        for name, audit in audits.items():
            before = proxy.stats.requests
            unpriced = r"pass max_requests= N to cap the requests \(max_cost= needs a price: .*\), or yes=True"
            with pytest.raises(SpendRefused, match=unpriced) as refused:
                audit(False)
            assert proxy.stats.requests == before, name
            assert refused.value.requests > 0 and refused.value.usd is None  # an unpriced model
            assert audit(True).summary  # confirmed: it runs
            assert proxy.stats.requests > before, name


def test_the_guard_judges_only_backends_that_send_requests_without_a_cap():
    class Fake:
        def __init__(self, usage, max_cost):
            self.usage, self.capped = usage, max_cost is not None

    def estimate(requests, usd=0.0, unpriced=True):
        return lambda: {"total": {"all": {"requests": requests, "usd": usd, "unpriced": unpriced}}}

    def never():
        raise AssertionError("estimated although nothing is judged")

    guard.guard_spend(never, {"target": Fake(None, None)})  # a local model: never judged
    guard.guard_spend(never, {"target": Fake(object(), 5.0)})  # capped: the cap bounds the spend
    guard.guard_spend(never, {"target": Fake(object(), None)}, yes=True)
    guard.guard_spend(estimate(guard.GUARD_REQUESTS), {"target": Fake(object(), None)})  # at the limit
    with pytest.raises(SpendRefused) as refused:  # one uncapped backend is enough
        guard.guard_spend(estimate(guard.GUARD_REQUESTS + 1), {"target": Fake(object(), 5.0),
                                                                 "reference": Fake(object(), None)})
    assert refused.value.requests == guard.GUARD_REQUESTS + 1 and refused.value.usd is None
    guard.guard_spend(estimate(10, usd=guard.GUARD_USD, unpriced=False), {"target": Fake(object(), None)})
    with pytest.raises(SpendRefused, match=r"estimated at 10 requests \(about \$1\.50\)"):
        guard.guard_spend(estimate(10, usd=1.5, unpriced=False), {"target": Fake(object(), None)})
    guard.guard_spend(estimate(10, usd=99.0, unpriced=True), {"target": Fake(object(), None)})  # USD unknown


def test_an_unpriced_model_is_shown_a_way_on_and_runs_under_a_request_cap(proxy, tiny_model_dir, files, tmp_path,
                                                                          monkeypatch):  # noqa: F811
    """The served model has no price: the refusal offers ``--max-requests`` (and how to give a
    price), ``--max-cost`` is refused with the same two ways, and ``--max-requests`` runs,
    stopping before the request past it."""
    cache = tmp_path / "cache"
    score = ["score", files["labelled"], "--scorers", "loss", "--out", tmp_path / "s.jsonl"]
    probe_requests(proxy, tiny_model_dir, cache)  # cached: what follows counts scoring requests only
    monkeypatch.setattr(guard, "GUARD_REQUESTS", 0)  # this small run counts as a big one
    refused, sent = bbmia(proxy, tiny_model_dir, cache, *score)
    assert refused.exit_code == 2 and sent == 0, refused.output
    assert "pass --max-requests N to cap the requests" in refused.output and "?price=" in refused.output
    priced, sent = bbmia(proxy, tiny_model_dir, cache, *score, "--max-cost", "5")
    assert priced.exit_code == 2 and sent == 0, priced.output
    assert "?price=" in priced.output and "--max-requests N" in priced.output
    stopped, sent = bbmia(proxy, tiny_model_dir, cache, *score, "--max-requests", "3")
    assert stopped.exit_code == 2 and sent == 3 and "--max-requests 3: 3 requests sent" in stopped.output, stopped.output
    finished, sent = bbmia(proxy, tiny_model_dir, cache, *score, "--max-requests", "100000")
    assert finished.exit_code == 0 and sent > 0, finished.output
