"""The restart soak (benchmarks/restart_soak.py) in short: two SIGKILLs of the scheduler at random points of a
load of tasks, a graph, a nested task, a `send_object` reference and a large stored result, each followed by
the same command on the same address within a second. Nothing is lost, duplicated, wrong or run again, and
the worker processes are the same at the end. The benchmark runs it 20 times with outages up to 10 s."""

from __future__ import annotations

import random
import sys

import pytest

from benchmarks.restart_soak import run

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]


def test_two_restarts_at_random_points_of_a_load_lose_and_redo_nothing(tmp_path) -> None:
    seed = random.randrange(1 << 30)
    counts = run(rounds=2, tasks=200, max_outage=1.0, seed=seed, log_dir=str(tmp_path))
    print(f"seed {seed}: {counts.summary()}")
    assert counts.rounds == 2
    assert (counts.lost, counts.duplicated, counts.wrong) == (0, 0, 0), f"seed {seed}"
    assert counts.ran_again == 0, f"seed {seed}: tasks whose result a worker held ran again"
    assert counts.workers_replaced == 0, f"seed {seed}"
