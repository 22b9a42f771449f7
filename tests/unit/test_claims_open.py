"""Two processes opening one new claims database at once (two commands started together on a
fresh cache): SQLite refuses the loser's switch to WAL at once, without its busy wait ("database
is locked" in 17 of 20 trials before the open retried it); both must claim, neither fail."""

import multiprocessing
import os
from pathlib import Path

from blackbox_mia.backends.api.http.cache.claims import ClaimTable

TRIALS = 10


def _claim(directory: str, barrier, results) -> None:
    barrier.wait()  # both processes open the new database at the same moment
    try:
        won = ClaimTable(Path(directory)).claim_many([f"k{i}" for i in range(20)], token=str(os.getpid()))
        results.put(sum(won))
    except Exception as exc:  # noqa: BLE001  (reported to the parent, which asserts)
        results.put(f"{type(exc).__name__}: {exc}")


def test_two_processes_open_a_new_claims_database_at_once(tmp_path):
    context = multiprocessing.get_context("spawn")
    for trial in range(TRIALS):
        directory = tmp_path / str(trial)
        barrier, results = context.Barrier(2), context.Queue()
        processes = [context.Process(target=_claim, args=(str(directory), barrier, results)) for _ in range(2)]
        for p in processes:
            p.start()
        for p in processes:
            p.join(timeout=120)
        won = [results.get(timeout=5) for _ in processes]
        assert all(isinstance(w, int) for w in won), (trial, won)  # claims, not an error
        assert max(won) == 20, (trial, won)  # the first to claim won every key (the other may take them after it exits)
