"""Tasks that submit tasks: the examples of document 003, deeper recursion, and the nesting limit."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import types

import cloudpickle
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import NestingLimitError
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.timeout(180)


def example(name: str) -> types.ModuleType:
    """A module of examples/, loaded from its file; its functions travel to the workers by value."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(REPO_ROOT, "examples", f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    return module


# The recursive functions of the two nested examples, as the examples define them.
fibonacci = example("nested_client").fibonacci
dynamic_fibonacci = example("graphtask_nested_client").fibonacci


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
            assert client.submit(fibonacci, client, 13).result(timeout=170) == 233


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
    child = client.submit(mark, log, "child", 0.0)
    # The child reaches this worker's queue, behind the four top-level tasks, before the parent waits: when
    # the wait hands the queue to another processor, the nested task must go first (docs/nested_tasks.md).
    # Without this pause the wait may be handed over before the child arrives, and top0 rightly starts.
    time.sleep(2.0)
    return child.result()


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
