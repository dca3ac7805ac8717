"""Mistakes fail where they are made, with the types code written for Scaler 1.9.x catches.

A call a function cannot take, an argument that cannot be serialized, a graph that cannot be computed
or an order whose extra is missing raise at `submit`, `map`, `get` or `send_object`, not later at
`result()`; each of our own error types is also the builtin error 1.9.x raised in its place.
"""

from __future__ import annotations

import concurrent.futures
import graphlib
import sys
import threading
import time
from typing import Any

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.client import graph_order_graphblas
from scaler.client.graph import GraphError
from scaler.errors import ProtectedModeError, SerializationError, TaskNotDoneError


def two(a: int, b: int) -> int:
    return a + b


def keyword_only(a: int, *, b: int) -> int:
    return a * b


def anything(*args: Any, **kwargs: Any) -> int:
    return len(args) + len(kwargs)


def inc(value: int) -> int:
    return value + 1


def total(values: list[int]) -> int:
    return sum(values)


class HoldsALock:
    """A callable that cannot be pickled."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self) -> int:
        return 1


# ---------------------------------------------------------------------------------------------- arguments


def test_submit_raises_type_error_for_a_call_the_function_cannot_take(client: Client) -> None:
    with pytest.raises(TypeError, match=r"two\(a, b\): missing a required argument: 'b'"):
        client.submit(two, 1)
    with pytest.raises(TypeError, match="too many positional arguments"):
        client.submit(keyword_only, 1, 2)  # a keyword-only parameter given by position
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        client.submit(two, 1, 2, c=3)
    with pytest.raises(TypeError, match="too many positional arguments"):
        client.submit(inc, 1, 2)
    # What binds still runs, keywords included; a builtin without a signature is not checked.
    assert client.submit(two, 1, b=2).result(timeout=30) == 3
    assert client.submit(keyword_only, 2, b=3).result(timeout=30) == 6
    assert client.submit(anything, 1, 2, x=3).result(timeout=30) == 3
    assert client.submit(max, 4, 7).result(timeout=30) == 7


def test_map_raises_type_error_naming_the_tuple_that_does_not_fit(client: Client) -> None:
    with pytest.raises(TypeError, match=r"argument tuple 2 does not fit two\(a, b\): too many"):
        client.map(two, [(1, 2), (3, 4), (5, 6, 7), (8, 9)])
    with pytest.raises(TypeError, match="argument tuple 0 does not fit .*missing a required argument: 'b'"):
        client.map(keyword_only, [(1,)])
    tuples = [(i, i) for i in range(2500)]
    tuples[1700] = (1,)  # past the first chunks of the map
    with pytest.raises(TypeError, match="argument tuple 1700 "):
        client.map(two, tuples)
    assert client.map(two, [(1, 2), (3, 4)]) == [3, 7]
    assert client.map(anything, [(), (1,), (1, 2)]) == [0, 1, 2]
    assert client.map(max, [(1, 2), (5, 3, 4)]) == [2, 5]


def test_map_of_bare_values_says_what_an_item_is(client: Client) -> None:
    with pytest.raises(TypeError, match=r"item 0 is an int$"):
        client.map(two, [1, 2])
    with pytest.raises(TypeError, match=r"item 1 is a str$"):
        client.map(two, [(1, 2), "ab"])


def test_get_raises_type_error_naming_the_key_whose_task_does_not_fit(client: Client) -> None:
    with pytest.raises(TypeError, match=r"task at key 'bad' does not fit two\(a, b\): missing"):
        client.get({"a": 1, "ok": (two, "a", 2), "bad": (two, "a")}, keys=["ok", "bad"])
    with pytest.raises(TypeError, match="task at key 'bad' does not fit .*too many positional arguments"):
        client.get({"a": 1, "bad": (inc, ["a"], 2)}, keys=["bad"])  # a key inside a list: a wrapped call
    assert client.get({"a": 1, "b": (two, "a", 2), "c": (total, ["a", "b"])}, keys=["c"]) == {"c": 4}


# ---------------------------------------------------------------------------------------------- serialization


def test_what_cannot_be_serialized_is_a_serialization_error_naming_it(client: Client) -> None:
    def raises(call: Any, *names: str) -> SerializationError:
        with pytest.raises(SerializationError) as raised:
            call()
        error = raised.value
        assert isinstance(error, TypeError)  # what code catching pickle's own error expects
        assert isinstance(error.__cause__, TypeError) and "cannot pickle" in str(error.__cause__)
        for name in names:
            assert name in str(error)
        return error

    lock = threading.Lock()
    raises(lambda: client.submit(two, 1, lock), "positional argument 1 of two", "_thread.lock")
    raises(lambda: client.submit(two, 1, b=lock), "keyword argument 'b' of two")
    raises(lambda: client.submit(HoldsALock()), "the function HoldsALock")
    raises(lambda: client.map(inc, [(1,), (2,), (lock,)]), "argument 0 of argument tuple 2 of map(inc)")
    raises(lambda: client.get({"a": 1, "x": (two, "a", lock)}, keys=["x"]), "argument 1 of the task at key 'x'")
    raises(lambda: client.get({"a": 1, "x": (total, ["a", lock])}, keys=["x"]), "of the task at key 'x'")
    raises(lambda: client.get({"x": (HoldsALock(),)}, keys=["x"]), "task at key 'x'", "HoldsALock")
    raises(lambda: client.send_object(lock, name="the lock"), "send_object (name 'the lock')")
    assert client.submit(two, 1, 2).result(timeout=30) == 3


# ---------------------------------------------------------------------------------------------- graphs


def test_a_cycle_is_a_graphlib_cycle_error(client: Client) -> None:
    for order in (None, "python"):
        with pytest.raises(graphlib.CycleError) as raised:
            client.get({"a": (inc, "b"), "b": (inc, "c"), "c": (inc, "a"), "d": 1}, keys=["a"], order=order)
        assert isinstance(raised.value, GraphError) and isinstance(raised.value, ValueError)
        message, cycle = raised.value.args
        assert "cycle" in message
        assert cycle[0] == cycle[-1] and sorted(cycle[:-1]) == ["a", "b", "c"]


def test_a_key_requested_twice_is_a_key_error(client: Client) -> None:
    graph = {"a": 1, "b": (inc, "a")}
    with pytest.raises(KeyError, match="more than once: \\['b'\\]"):
        client.get(graph, keys=["b", "a", "b"])
    assert client.get(graph, keys=["b", "a"]) == {"b": 2, "a": 1}


def test_graphblas_order_without_the_extra_says_how_to_install_it(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(graph_order_graphblas, "_graphblas", None)  # forget an earlier successful import
    monkeypatch.setitem(sys.modules, "graphblas", None)  # and make the next one fail
    with pytest.raises(ModuleNotFoundError, match='pip install "scaler\\[graphblas\\]"'):
        client.get({"a": 1, "b": (inc, "a")}, keys=["b"], order="graphblas")


# ---------------------------------------------------------------------------------------------- futures, shutdown


def test_profiling_info_of_an_unfinished_task_is_also_a_value_error(client: Client) -> None:
    future = client.submit(time.sleep, 60, profiling=True)
    try:
        with pytest.raises(ValueError, match="not finished") as raised:
            future.profiling_info()
        assert isinstance(raised.value, concurrent.futures.InvalidStateError)
        assert isinstance(raised.value, TaskNotDoneError)
    finally:
        future.cancel(force=True)


def test_a_refused_shutdown_is_also_a_value_error(combo: SchedulerClusterCombo) -> None:
    client = Client(address=combo.get_address(), timeout_seconds=30)
    with pytest.raises(ValueError, match="protected") as raised:
        client.shutdown()
    assert isinstance(raised.value, ProtectedModeError)
