"""Client.get: graph tasks against a real scheduler and real workers."""

from __future__ import annotations

import concurrent.futures
import operator
import os
import time
import traceback
from typing import Any, Iterator

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.client.graph import GraphError
from scaler.scheduler.config import default_monitor_address
from scaler.ui.feed import MonitorSubscriber
from tests.integration.test_examples import run_example

pytestmark = pytest.mark.timeout(90)


def inc(i: int) -> int:
    return i + 1


def add(a: Any, b: Any) -> Any:
    return a + b


def minus(a: int, b: int) -> int:
    return a - b


def total(*values: Any) -> int:
    return sum(total(*value) if isinstance(value, (list, tuple)) else value for value in values)


def fail(message: str) -> None:
    raise ValueError(message)


def slow_inc(value: int, seconds: float) -> int:
    time.sleep(seconds)
    return value + 1


def touch(path: str) -> str:
    with open(path, "w") as marker:
        marker.write("ran")
    return path


def megabytes(size: int, *_: Any) -> bytes:
    return b"x" * (size << 20)


def next_block(previous: bytes) -> bytes:
    return bytes(len(previous))  # a new value of the same size: each stage's input can be freed


def tree_reduction(leaves: int) -> tuple[dict, Any]:
    graph: dict = {("leaf", i): (operator.neg, i) for i in range(leaves)}
    level: list = [("leaf", i) for i in range(leaves)]
    depth = 0
    while len(level) > 1:
        following = []
        for j in range(0, len(level) - 1, 2):
            graph[("sum", depth, j)] = (operator.add, level[j], level[j + 1])
            following.append(("sum", depth, j))
        if len(level) % 2:
            following.append(level[-1])
        level = following
        depth += 1
    return graph, level[0]


@pytest.fixture
def monitor(combo: SchedulerClusterCombo) -> Iterator[MonitorSubscriber]:
    with MonitorSubscriber(default_monitor_address(combo.get_address())) as subscriber:
        yield subscriber


def wait_until_the_scheduler_holds_no_task(monitor: MonitorSubscriber, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    counts = None
    while time.monotonic() < deadline:
        snapshot = monitor.receive(timeout_seconds=1.0)
        if snapshot is not None:
            counts = snapshot.tasks
            if counts.unassigned == counts.running == counts.waiting_on_dependencies == 0:
                return
    raise AssertionError(f"tasks still held by the scheduler after {timeout}s: {counts}")


def test_the_graph_of_document_003(client: Client) -> None:
    graph = {"a": 2, "b": 2, "c": (inc, "a"), "d": (add, "a", "b"), "e": (minus, "d", "c"), "f": add}
    result = client.get(graph, keys=["a", "b", "c", "d", "e", "f"])
    assert result == {"a": 2, "b": 2, "c": 3, "d": 4, "e": 1, "f": add}
    assert result["f"] is add  # a callable value comes back as it is, not called
    assert client.get(graph, keys=["e"]) == {"e": 1}


def test_block_false_returns_a_future_per_requested_key(client: Client) -> None:
    graph = {"a": 2, "slow": (slow_inc, "a", 0.5), "after": (inc, "slow")}
    futures = client.get(graph, keys=["after", "a"], block=False)
    assert set(futures) == {"after", "a"}
    assert all(isinstance(future, concurrent.futures.Future) for future in futures.values())
    assert futures["a"].result(timeout=5) == 2
    assert futures["after"].result(timeout=30) == 4


def test_keys_inside_containers_nested_tasks_aliases_and_tuple_keys(client: Client) -> None:
    graph: dict = {
        ("x", 0): 1,
        ("x", 1): (inc, ("x", 0)),
        "nested": (add, (inc, ("x", 0)), ("x", 1)),           # a task inside a task
        "listed": (total, [("x", 0), ("x", 1), "nested"]),    # keys inside a list
        "deep": (total, [(inc, "nested"), (("x", 1), 10)]),   # a task and a tuple inside a list
        "alias": "listed",
        "literal_arguments": (total, [1, 2], (3,), "not a key".count("o")),
    }
    result = client.get(graph, keys=["nested", "listed", "deep", "alias", "literal_arguments", ("x", 1)])
    assert result == {"nested": 4, "listed": 7, "deep": 5 + 12, "alias": 7, "literal_arguments": 7, ("x", 1): 2}


def test_a_failing_node_fails_what_depends_on_it_and_nothing_else(
    client: Client, monitor: MonitorSubscriber
) -> None:
    graph = {
        "bad": (fail, "node bad broke"),
        "after_bad": (inc, "bad"),
        "far_after_bad": (add, "after_bad", "independent"),
        "independent": (slow_inc, 1, 0.3),
        "also_independent": (inc, "independent"),
    }
    futures = client.get(graph, keys=["far_after_bad", "after_bad", "also_independent"], block=False)
    assert futures["also_independent"].result(timeout=30) == 3
    for key in ("after_bad", "far_after_bad"):
        error = futures[key].exception(timeout=30)
        assert isinstance(error, ValueError) and "node bad broke" in str(error)
        printed = "".join(traceback.format_exception(error))
        assert "def fail" in printed or "raise ValueError(message)" in printed  # the remote frame
    with pytest.raises(ValueError, match="node bad broke"):
        client.get(graph, keys=["also_independent", "far_after_bad"])
    # Nothing is left waiting on the client's side, and the cluster carries on.
    deadline = time.monotonic() + 30
    while client._connection.unfinished_tasks and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not client._connection.unfinished_tasks
    wait_until_the_scheduler_holds_no_task(monitor)  # the failed node's dependents are gone too
    assert client.get(graph, keys=["also_independent"]) == {"also_independent": 3}


@pytest.mark.parametrize(
    "graph, keys, message",
    [
        ({"a": (inc, "b"), "b": (inc, "a")}, ["a"], "cycle"),
        ({"a": (inc, "a")}, ["a"], "cycle"),
        ({"a": "b", "b": "a"}, ["a"], "cycle"),
        ({"a": 1}, ["a", "missing"], "'missing' is not in the graph"),
    ],
    ids=["two-node-cycle", "self-cycle", "alias-cycle", "missing-key"],
)
def test_cycles_and_missing_keys_fail_before_anything_runs(
    client: Client, tmp_path: Any, graph: dict, keys: list, message: str
) -> None:
    marker = str(tmp_path / "ran")
    graph = dict(graph, marker=(touch, marker))
    with pytest.raises(ValueError, match=message) as raised:
        client.get(graph, keys=["marker", *keys])
    assert isinstance(raised.value, GraphError)
    time.sleep(0.5)
    assert not os.path.exists(marker), "a task ran although the graph was refused"


def test_a_string_that_is_no_key_is_a_literal_and_a_missing_requested_key_fails_at_get(client: Client) -> None:
    # README, Graphs: "y" names a key only if the graph has one; otherwise the function receives "y".
    assert client.get({"x": (str.upper, "y")}, keys=["x"]) == {"x": "Y"}
    assert client.get({"y": "z", "x": (str.upper, "y")}, keys=["x"]) == {"x": "Z"}
    # So a typo in an argument is found when the task runs, with the function's own error...
    futures = client.get({"x": (inc, "y")}, keys=["x"], block=False)
    with pytest.raises(TypeError, match="str"):
        futures["x"].result(timeout=30)
    # ...while a requested key that is missing is refused by get itself, before anything runs.
    with pytest.raises(ValueError, match="'y' is not in the graph") as raised:
        client.get({"x": (inc, 1)}, keys=["y"])
    assert isinstance(raised.value, KeyError)


def graphblas_available() -> bool:
    try:
        from scaler.client.graph_order_graphblas import graphblas_available as available
    except ImportError:
        return False
    return available()


@pytest.mark.timeout(150)
def test_a_100k_node_graph_computes_and_get_without_block_returns_its_futures(client: Client) -> None:
    """The client's cost is printed, not asserted (tests never assert a time): benchmarks/graphs.py measures it."""
    graph, root = tree_reduction(50_000)
    assert len(graph) == 99_999
    assert client.get(tree_reduction(4)[0], keys=[("leaf", 0)]) == {("leaf", 0): 0}  # workers up, functions sent
    wall_started, cpu_started = time.perf_counter(), time.thread_time()
    futures = client.get(graph, keys=[root], block=False)
    cpu_seconds, wall_seconds = time.thread_time() - cpu_started, time.perf_counter() - wall_started
    assert futures[root].result(timeout=120) == -sum(range(50_000))
    print(f"100k-node graph, client side: {cpu_seconds:.3f} s CPU, {wall_seconds:.3f} s wall")


@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    "order",
    [
        "python",
        pytest.param("graphblas", marks=pytest.mark.skipif(not graphblas_available(), reason="no python-graphblas")),
    ],
)
def test_a_100k_node_graph_ordered_by_kahn_or_graphblas(client: Client, order: str) -> None:
    """Both orderings Client.get offers besides its default walk run a large graph to the right answer
    on real workers; tests/unit/test_graph_plan.py checks every order they give is a valid one."""
    graph, root = tree_reduction(50_000)
    diamond = {"a": 1, "b": (inc, "a"), "c": (add, "a", "b"), "d": (minus, "c", "b"), "e": (total, ["b", "c", "d"])}
    assert client.get(diamond, keys=["e", "d"], order=order) == {"e": 2 + 3 + 1, "d": 1}
    assert client.get(graph, keys=[root], order=order) == {root: -sum(range(50_000))}
    with pytest.raises(GraphError, match="cycle"):
        client.get({"a": (inc, "b"), "b": (inc, "a")}, keys=["a"], order=order)


def test_a_long_chain(client: Client) -> None:
    graph: dict = {f"x{i + 1}": (inc, f"x{i}") for i in range(2_000)}
    graph["x0"] = 0
    assert client.get(graph, keys=["x2000", "x1000"]) == {"x2000": 2000, "x1000": 1000}


def test_intermediate_values_are_freed_once_their_dependents_have_them(
    client: Client, combo: SchedulerClusterCombo
) -> None:
    """Eight 32 MiB stages in a row: the scheduler's peak memory grows by a few stages, not by all eight."""
    status_path = f"/proc/{combo.scheduler_pid}/status"
    if not os.path.exists(status_path):
        pytest.skip("needs /proc to read the scheduler's peak memory")

    def peak_rss_mib() -> float:
        with open(status_path) as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmHWM in /proc status")

    graph: dict = {"stage0": (megabytes, 32)}
    for stage in range(1, 8):
        graph[f"stage{stage}"] = (next_block, f"stage{stage - 1}")
    graph["size"] = (len, "stage7")
    before = peak_rss_mib()
    assert client.get(graph, keys=["size"]) == {"size": 32 << 20}
    grown = peak_rss_mib() - before
    assert grown < 5 * 32, f"the scheduler's peak memory grew by {grown:.0f} MiB for 8 stages of 32 MiB"


def fibonacci(clnt: Client, n: int) -> int:
    """Document 003's dynamic graph: each task builds a graph and submits more tasks from its worker."""
    if n == 0:
        return 0
    elif n == 1:
        return 1
    fib_graph = {"n": n, "one": 1, "two": 2, "n_minus_one": (minus, "n", "one"), "n_minus_two": (minus, "n", "two")}
    res = clnt.get(fib_graph, keys=["n_minus_one", "n_minus_two"])
    a = clnt.submit(fibonacci, clnt, res.get("n_minus_one"))
    b = clnt.submit(fibonacci, clnt, res.get("n_minus_two"))
    return a.result() + b.result()


@pytest.mark.timeout(120)
def test_graphs_built_dynamically_inside_tasks() -> None:
    # Every level of the recursion holds a processor while it waits for the level below; 10 workers
    # (as in document 003) are enough for fibonacci(4) whatever the worker does about blocked tasks.
    with SchedulerClusterCombo(n_workers=10, logging_level="WARNING") as cluster:
        with Client(address=cluster.get_address(), timeout_seconds=30) as client:
            assert client.submit(fibonacci, client, 4).result(timeout=90) == 3


@pytest.mark.timeout(200)
def test_example_graph_client(python_env: dict[str, str]) -> None:
    output = run_example("graph_client.py", python_env)
    assert "{'a': 2, 'b': 2, 'c': 3, 'd': 4, 'e': 1, 'f': <function add at" in output
