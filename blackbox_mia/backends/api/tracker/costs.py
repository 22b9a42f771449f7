"""What tracking texts through an endpoint is expected to cost, from the probe and the tokenizer.

Exact where the request count depends only on the texts: ``prompt`` (echo: one request per window,
the window as prompt), ``forced`` and ``topn`` (one request per position, its prefix as prompt).
A window as long as the context sends all but its last token and reads that target at the
generated position: forced there in the same request where the tracker may
(:meth:`~.tracker.Tracker.forces_in_window`: exact), else from the top-n, and where it is not
listed there (:data:`LISTED_SHARE` assumed listed; anywhere from none to all, in the stated
uncertainty) by the per-position strategy in requests of its own.
A request's prompt is billed in full, so per-position strategies bill Σ prefix lengths: N(N−1)/2
prompt tokens for a text of N tokens (BOS included). Measured rates, with a stated uncertainty,
for strategies whose request count depends on the model's answers:

``postbias``  1 request where the biased answer lists the target (:mod:`.postbias`), one more
              per ~13 nats it lies below the top-n's last entry:
              :data:`POSTBIAS_REQUESTS` per position (measured), ± :data:`POSTBIAS_UNCERTAINTY`.
``bisect``    1 for a listed target, else 1 + the flip search: about log2(first step / ε) + 2
              questions (galloping, then halving to ε) plus the sampled re-checks;
              :data:`LISTED_SHARE` of targets listed (measured on the GSM8K canary by
              ``benchmarks/bench_blackbox.py``), ± :data:`RATE_UNCERTAINTY`; with chained
              questions, fewer requests, each billing more completion tokens, and with the
              unbiased answers read by runs, fewer unbiased requests (measured rates).
``run``       about forced read-out's figure or fewer: each window starts with a run, which on text
              the model does not reproduce loses (:data:`RUN_WINDOW_REQUESTS` more requests a
              window, ± :data:`RUN_WINDOW_SPREAD`), far fewer on memorized ones; the forced figure
              plus that, an upper bound.
"""

from __future__ import annotations

import math

from ....cost.estimate import CostEstimate
from ....cost.prices import request_cost
from ....text.windows import sliding_windows
from .flips import CHECK_LEADING, first_step
from .tracker import Tracker

LISTED_SHARE = 0.4  # share of a text's targets listed in the top-5 (GSM8K canary: 0.34 non-members, 0.48 members)
GALLOP_REQUESTS = 2.0  # mean galloping requests before the halving starts (canary gaps: median ~1.5-2.5 nats)
RATE_UNCERTAINTY = 0.3  # relative uncertainty of the measured rates (bisect)
# post-bias read-out (one request at the guarded bias, ~11.3 nats on a float32 server): 1,763
# requests for 1,780 positions of 10 GSM8K test questions through the dup-16 canary (top-5; forced
# read-out 1,762: shared prefixes are cache hits), so about one request per position; texts far
# below the top-n (a peaked model) take one more request per ~13 nats
POSTBIAS_REQUESTS = 1.0
POSTBIAS_UNCERTAINTY = 0.1
# run reading (runs.py) on texts the model does not reproduce, above forced read-out's figure, per
# window (each window starts with a run): 2.6 (1,596 requests against 1,570 on 10 non-member GSM8K
# questions, one window each, through the dup-16 canary), 0.71 (12 GSM8K test texts in 299 windows
# of 32 tokens through the memorizing test canary), 1.02 (6 in 164 windows of 24 through the tiny
# random test model); members take half as many in all
RUN_WINDOW_REQUESTS = 1.5
RUN_WINDOW_SPREAD = 1.1  # per window: the measured 0.71-2.6 within 1.5 ± 1.1
# chained bisection (Capabilities.chained_flips, chains of 4), measured on 8 GSM8K train questions
# through the dup-16 canary: flip requests per flip question (4.60 per token chained, 5.26 alone),
# and completion tokens per flip request (7.53 generated tokens per token over those 4.60 requests)
CHAINED_REQUESTS_PER_QUESTION = 0.874
CHAINED_COMPLETION_PER_REQUEST = 1.64
# unbiased answers read by runs (Capabilities.run_reading, runs.read_unbiased): requests and
# completion tokens per position, replayed on white-box answers of 10 GSM8K train questions
# through the dup-16 canary (22 % of targets the argmax)
RUN_UNBIASED_REQUESTS = 0.789
RUN_UNBIASED_COMPLETION = 2.89


def positions(tracker: Tracker, texts: list[str]) -> tuple[list[int], list[int], list[int]]:
    """Per window of every text: ``(prompt lengths of per-position requests, echo prompt lengths,
    prompt lengths of the windows whose last target may need a request of its own)``, in tokens:
    the prefix length of every target, the prompt an echo request sends per window, and that
    prompt for each window as long as the context that does not force its last target in that
    request (:meth:`~.tracker.Tracker.forces_in_window`)."""
    prefixes, windows, unforced = [], [], []
    context = tracker.config.context
    for text in texts:
        seq = tracker.sequence(text)
        for start, end, first in sliding_windows(len(seq), context) if context else [(0, len(seq), 1)]:
            prefixes.extend(j - start for j in range(first, end))
            if context is None or end - start < context:
                windows.append(end - start)
            else:  # all but the last token: that target is read at the generated position
                windows.append(end - start - 1)
                if not tracker.forces_in_window(seq[end - 1]):
                    unforced.append(end - start - 1)
    return prefixes, windows, unforced


def chained(tracker: Tracker) -> bool:
    """Whether the tracker bisects texts whole with chained questions (:mod:`.bisection`)."""
    return tracker.bisects_texts() and tracker.bisection.chain_tokens > 1


def unbiased_runs(tracker: Tracker) -> bool:
    """Whether the tracker bisects texts whole with their unbiased answers read by runs."""
    return tracker.bisects_texts() and tracker.caps.run_reading


def per_position_rate(tracker: Tracker, strategy: str) -> tuple[float, float, float]:
    """(expected requests, completion tokens, relative uncertainty) per position of a
    per-position strategy."""
    if strategy in ("forced", "topn"):
        return 1.0, 1.0, 0.0
    if strategy == "postbias":
        return POSTBIAS_REQUESTS, POSTBIAS_REQUESTS, POSTBIAS_UNCERTAINTY
    config = tracker.config
    search = math.log2(first_step(config.epsilon) / config.epsilon) + GALLOP_REQUESTS
    checks = 2 * config.verify_repeats * (1.0 if not tracker.caps.flips_reproducible else 1 / config.verify_every)
    unbiased, unbiased_completion = (RUN_UNBIASED_REQUESTS, RUN_UNBIASED_COMPLETION) if unbiased_runs(tracker) else (1.0, 1.0)
    search_completion = 1.0
    if chained(tracker):
        search, search_completion = search * CHAINED_REQUESTS_PER_QUESTION, CHAINED_COMPLETION_PER_REQUEST
    checks *= config.verify_flips  # asked alone: one completion token each
    unlisted = 1 - LISTED_SHARE
    return (unbiased + unlisted * (search + checks),
            unbiased_completion + unlisted * (search * search_completion + checks), RATE_UNCERTAINTY)


def estimate(tracker: Tracker, texts: list[str], price: tuple[float, float] | None) -> CostEstimate:
    """The expected requests, billed tokens and USD of ``tracker.track(texts)``.

    Args:
        tracker: the tracker (probe done, configuration set).
        texts: the texts to score.
        price: USD per 1M prompt / completion tokens; ``None``: unpriced (USD 0).
    """
    prefixes, windows, unforced = positions(tracker, texts)
    mode = tracker.mode()
    notes = ["answers already in the response cache are counted as if paid",
             "the capability probe's requests (once per endpoint and model) are not counted"]
    if mode == "prompt":
        rate, per_position, rate_spread = per_position_rate(tracker, tracker.per_position_strategy())
        extra = (1 - LISTED_SHARE) * rate  # per unforced full window: its last target when not listed
        requests = round(len(windows) + extra * len(unforced))
        prompt = round(sum(windows) + extra * sum(unforced))
        completion = round(len(windows) + (1 - LISTED_SHARE) * per_position * len(unforced))
        # the listed share of those targets may be anything from none to all, the rate off by its own spread
        worst = max(LISTED_SHARE, 1 - LISTED_SHARE) * rate * (1 + rate_spread) * len(unforced)
        spread = worst / requests if requests else 0.0
        strategy = "prompt"
        if unforced:
            notes.append(f"{len(unforced):,} windows as long as the context read their last target from the top-n: "
                         f"{LISTED_SHARE:.0%} assumed listed there, the others read by "
                         f"{tracker.per_position_strategy()} in requests of their own")
    else:
        strategy = mode if mode not in ("auto", "run") else tracker.per_position_strategy()
        rate, per_position, spread = per_position_rate(tracker, strategy)
        windows_extra = RUN_WINDOW_REQUESTS * len(windows) if mode == "run" else 0.0  # runs that lose
        bound = 1 + windows_extra / (rate * len(prefixes)) if prefixes else 1.0  # each such request a mean prefix
        requests = round(rate * bound * len(prefixes))
        if mode == "run" and requests:
            spread = max(spread, RUN_WINDOW_SPREAD * len(windows) / requests)
        prompt, completion = round(rate * bound * sum(prefixes)), round(per_position * len(prefixes))
        if strategy == "bisect":
            notes.append(f"bisection: {LISTED_SHARE:.0%} of targets assumed listed in the top-n; the first "
                         f"{CHECK_LEADING} positions of a text and 1 in {tracker.config.verify_every} others re-checked")
        if strategy == "bisect" and chained(tracker):
            notes.append("bisection questions of consecutive positions chained (up to "
                         f"{tracker.bisection.chain_tokens} generated tokens a request): measured rates")
        if strategy == "bisect" and unbiased_runs(tracker):
            notes.append("bisection's unbiased answers read by runs (one request per target that is not the "
                         "argmax): measured rates")
        if strategy == "bisect" and tracker.config.refine_for:
            notes.append("bisection refined to the scores' precision (means of the lowest "
                         f"{', '.join(f'{k:g}%' for k in tracker.config.refine_for)}): at most about this figure "
                         "(values that cannot change a score keep coarse bounds)")
        if mode == "run":
            notes.append(f"run reading: at most about {strategy}'s figure per position plus {RUN_WINDOW_REQUESTS:g} "
                         "requests a window, given here (a window starts with a run, which loses on text the model "
                         "does not reproduce; far fewer requests where it does)")
            strategy = f"run+{strategy}"
    usd = request_cost(prompt, completion, price)
    return CostEstimate(requests=requests, prompt_tokens=prompt, completion_tokens=completion, usd=usd,
                        relative_uncertainty=spread, strategy=strategy, unpriced=price is None, notes=tuple(notes))
