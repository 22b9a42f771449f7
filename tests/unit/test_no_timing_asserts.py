"""No test fails because a machine is slow (issue 51, item 4): no assertion puts a numeric upper
bound on a measured time (a training, a scoring, a refusal). Speed targets live in benchmarks/;
a test of a timeout or a deadline uses a fake clock, an event, or a bound stated as a fraction of
the time it must not wait for (``CLAIM_TTL_S / 4``), never a bare number of seconds."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MEASURED = r"(monotonic\(\)|perf_counter\(\)|time\.time\(\)|\bwaited\b|\belapsed\w*|\w*seconds\b\W*)"
TIMED_UPPER_BOUND = re.compile(rf"^\s*assert\b.*{MEASURED}.*<=?\s*[\d.]+\b")


def timed_upper_bounds(text: str) -> list[str]:
    """The assertion lines of ``text`` that bound a measured time by a number."""
    return [line.strip() for line in text.splitlines() if TIMED_UPPER_BOUND.search(line)]


def test_the_pattern_finds_the_timing_guards_of_issue_51():
    assert timed_upper_bounds('    assert m["train_seconds"] < 120  # a tiny canary')
    assert timed_upper_bounds("    assert time.monotonic() - start < 2.0  # not the claim's expiry")
    assert timed_upper_bounds("    assert 0.2 < waited < 2.0")
    assert timed_upper_bounds("    assert elapsed < 30")
    assert not timed_upper_bounds("    assert time.monotonic() - start < CLAIM_TTL_S / 4")
    assert not timed_upper_bounds("    assert time.monotonic() - started >= 0.2 and not first.done()")
    assert not timed_upper_bounds("    assert usage_line([a, b], elapsed_s=2.0) == '40 req (20.0/s)'")


def test_no_test_bounds_a_measured_time_by_a_number():
    found = {f"{path.relative_to(TESTS)}: {line}" for path in TESTS.rglob("*.py") if path.name != Path(__file__).name
             for line in timed_upper_bounds(path.read_text(encoding="utf-8"))}
    assert not found, "\n".join(sorted(found))
