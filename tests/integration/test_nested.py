"""Tasks that submit tasks: the examples of document 003, deeper recursion, and the nesting limit."""

from __future__ import annotations

import os
import time

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import NestingLimitError

pytestmark = pytest.mark.timeout(180)


def fibonacci(client: Client, n: int):
    if n == 0:
        return 0
    elif n == 1:
        return 1
    else:
        a = client.submit(fibonacci, client, n - 1)
        b = client.submit(fibonacci, client, n - 2)
        return a.result() + b.result()


def minus(a, b):
    return a - b


def dynamic_fibonacci(clnt: Client, n: int):
    if n == 0:
        return 0
    elif n == 1:
        return 1
    else:
        fib_graph = {"n": n, "one": 1, "two": 2, "n_minus_one": (minus, "n", "one"), "n_minus_two": (minus, "n", "two")}
        res = clnt.get(fib_graph, keys=["n_minus_one", "n_minus_two"])
        n_minus_one = res.get("n_minus_one")
        n_minus_two = res.get("n_minus_two")
        a = clnt.submit(dynamic_fibonacci, clnt, n_minus_one)
        b = clnt.submit(dynamic_fibonacci, clnt, n_minus_two)
        return a.result() + b.result()


def nested_map(client: Client, n: int) -> int:
    return sum(client.map(abs, [(-i,) for i in range(n)]))


def test_nested_fibonacci_on_one_worker() -> None:
    """Document 003's nested example: one worker keeps serving while its task waits on nested tasks."""
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        with Client(address=cluster.get_address()) as client:
            assert client.submit(fibonacci, client, 8).result(timeout=150) == 21
            # map and get from inside a task, too
            assert client.submit(nested_map, client, 10).result(timeout=60) == 45
            assert client.submit(dynamic_fibonacci, client, 6).result(timeout=150) == 8


def test_deeper_recursion_on_two_workers() -> None:
    with SchedulerClusterCombo(n_workers=2, logging_level="WARNING") as cluster:
        with Client(address=cluster.get_address()) as client:
            assert client.submit(fibonacci, client, 16).result(timeout=170) == 987


def test_nesting_beyond_the_processor_limit_is_a_clear_error_not_a_hang() -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="ERROR", max_processors=3) as cluster:
        with Client(address=cluster.get_address()) as client:
            with pytest.raises(NestingLimitError, match="--max-processors 3"):
                client.submit(fibonacci, client, 10).result(timeout=120)
            # the worker is still usable afterwards
            assert client.submit(fibonacci, client, 1).result(timeout=60) == 1
            assert client.map(abs, [(-1,), (-2,)]) == [1, 2]


def mark(log: str, name: str, seconds: float) -> str:
    with open(log, "a") as file:
        file.write(name + "\n")
    time.sleep(seconds)
    return name


def parent_submitting_late(client: Client, log: str) -> str:
    mark(log, "parent", 1.5)  # meanwhile the test queues top-level work behind this task
    return client.submit(mark, log, "child", 0.0).result()


def test_nested_tasks_are_preferred_over_queued_top_level_work(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """On one worker: a nested task submitted after four top-level tasks still runs before them."""
    log = str(tmp_path / "order.log")
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        with Client(address=cluster.get_address()) as client:
            assert client.submit(abs, -1).result(timeout=60) == 1
            parent = client.submit(parent_submitting_late, client, log)
            deadline = time.monotonic() + 60
            while not os.path.exists(log):
                assert time.monotonic() < deadline, "the parent task never started"
                time.sleep(0.01)
            top_level = [client.submit(mark, log, f"top{i}", 0.2) for i in range(4)]
            assert parent.result(timeout=120) == "child"
            assert [future.result(timeout=60) for future in top_level] == [f"top{i}" for i in range(4)]
    with open(log) as file:
        order = file.read().split()
    assert order[:2] == ["parent", "child"], f"queued top-level work ran before the nested task: {order}"
