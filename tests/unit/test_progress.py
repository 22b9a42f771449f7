"""Progress per text, with the requests sent, their rate and the spend so far."""

from __future__ import annotations

import re
import time

import numpy as np

from blackbox_mia import progress
from blackbox_mia.cost.usage import Usage
from blackbox_mia.backends.base import LOGPROBS, Backend
from blackbox_mia.datasets import Item
from blackbox_mia.progress import usage_line
from blackbox_mia.runner import score_items
from blackbox_mia.scorers import parse_scorers
from blackbox_mia.types import Provenance, TokenLogprobs


class Paying(Backend):
    """Three 'requests' and $0.001 per text; reports each text as it is done."""

    features = frozenset({LOGPROBS})

    def __init__(self, unpriced: bool = False):
        super().__init__()
        self._usage = Usage(unpriced=unpriced)

    @property
    def usage(self) -> Usage:
        return self._usage

    async def _alogprobs(self, texts, progress, on_done, vocab_stats=None):
        out = []
        for i, text in enumerate(texts):
            self._usage.requests += 3
            self._usage.cost_usd += 0.0 if self._usage.unpriced else 0.001
            lp = TokenLogprobs(np.arange(len(text)), list(text), [-1.0] * len(text), (0,),
                               Provenance("fake", "fake", "fixed", True))
            on_done(i, lp)
            out.append(lp)
        return out

    def describe(self):
        return {"backend": "paying"}


class Local(Paying):
    @property
    def usage(self):
        return None


def test_usage_line_sums_backends_and_says_unpriced():
    a, b = Paying(), Paying(unpriced=True)
    a.usage.requests, a.usage.cost_usd, b.usage.requests = 30, 0.0123, 10
    assert usage_line([a, b], elapsed_s=2.0) == "40 req (20.0/s), $0.0123"
    a.usage.cost_usd = 0.0
    assert usage_line([a, b], elapsed_s=2.0) == "40 req (20.0/s), unpriced"
    assert usage_line([Local()], elapsed_s=1.0) is None
    for backend in (a, b):
        backend.close()


def test_score_progress_moves_per_text_and_shows_requests_and_spend(capsys):
    items = [Item(f"t{i}", f"text number {i}", None) for i in range(4)]
    backend = Paying()
    try:
        score_items(items, parse_scorers("loss"), {"target": backend}, None, progress=True)
    finally:
        backend.close()
    err = capsys.readouterr().err
    counts = [int(n) for n in re.findall(r"(\d)/4", err)]
    assert counts[-1] == 4 and set(counts) >= {1, 2, 3, 4}  # the bar moved text by text
    assert "12 req (" in err and "$0.0040" in err  # 4 texts x 3 requests, 4 x $0.001


def test_the_ticker_refreshes_between_texts(monkeypatch):
    monkeypatch.setattr(progress, "PROGRESS_REFRESH_S", 0.01)
    shown = []

    class Bar:
        def set_postfix_str(self, text, refresh=True):
            shown.append(text)

    backend = Paying()
    backend.usage.requests = 7
    ticker = progress.ProgressTicker(Bar(), [backend])
    deadline = time.monotonic() + 10
    while len(shown) < 2 and time.monotonic() < deadline:  # the thread refreshes with no text finishing
        time.sleep(0.005)
    ticker.stop()
    backend.close()
    assert shown[0].startswith("7 req (") and shown[-1].endswith("$0.0000")
