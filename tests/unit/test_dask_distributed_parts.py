"""The pure parts of scaler.compat.dask.distributed, without a cluster: futures nested in arguments, keys,
resources as tags, and which client is dask's scheduler."""

from __future__ import annotations

import concurrent.futures
import pickle
from typing import Any

import pytest

dask = pytest.importorskip("dask")

from scaler.client.graph_errors import GraphError  # noqa: E402
from scaler.client.object_reference import ObjectReference  # noqa: E402
from scaler.compat.dask.distributed import default, durations  # noqa: E402
from scaler.compat.dask.distributed.arguments import fill_slots, futures_in, prepare_call  # noqa: E402
from scaler.compat.dask.distributed.future import Future  # noqa: E402
from scaler.compat.dask.distributed.key_table import KeyTable  # noqa: E402
from scaler.compat.dask.distributed.keys import data_key, task_key  # noqa: E402
from scaler.compat.dask.distributed.resources import tags_of_resources  # noqa: E402


class _Holder:
    """What a Future needs of its client here: the key table (no connection: these keys are scattered)."""

    asynchronous = False

    def __init__(self) -> None:
        self._keys = KeyTable()

    def scattered(self, key: str) -> Future:
        state = self._keys.add_scattered(key, ObjectReference(name=key, object_id=key.encode(), size=1))
        return Future(key, self, state)  # type: ignore[arg-type]

    def _maybe_async(self, fn: Any, *args: Any, **kwargs: Any) -> Any:  # a synchronous client's: a plain call
        return fn(*args, **kwargs)


def _argument(state: Any) -> Any:
    return ("value-of", state.key)


def _add(*args: Any, **kwargs: Any) -> tuple:
    return args, kwargs


def test_top_level_futures_go_as_they_are() -> None:
    holder = _Holder()
    x, y = holder.scattered("x"), holder.scattered("y")
    call = prepare_call(_add, (x, 1), {"b": y}, _argument)
    assert call.fn is _add
    assert call.args == (("value-of", "x"), 1) and call.kwargs == {"b": ("value-of", "y")}
    assert [state.key for state in call.dependencies] == ["x", "y"]


def test_nested_futures_become_top_level_arguments_put_back_on_the_worker() -> None:
    holder = _Holder()
    x, y = holder.scattered("x"), holder.scattered("y")
    call = prepare_call(_add, ([x, (y, 2)], {"k": {x}}), {"d": {"z": y}}, _argument)
    assert call.fn is fill_slots and call.kwargs == {}
    fn, template_args, template_kwargs, *values = call.args
    assert fn is _add and values == [("value-of", "x"), ("value-of", "y"), ("value-of", "x"), ("value-of", "y")]
    args, kwargs = fill_slots(*call.args)  # what the worker runs
    assert args == ([("value-of", "x"), (("value-of", "y"), 2)], {"k": {("value-of", "x")}})
    assert kwargs == {"d": {"z": ("value-of", "y")}}


def test_a_keyword_the_native_submit_takes_goes_through_fill_slots() -> None:
    call = prepare_call(_add, (1,), {"tags": 2, "priority": 3}, _argument)
    assert call.fn is fill_slots and fill_slots(*call.args) == ((1,), {"tags": 2, "priority": 3})


def test_futures_in_structures_and_collections() -> None:
    holder = _Holder()
    x, y = holder.scattered("x"), holder.scattered("y")
    assert futures_in([x, {"a": (y, x)}, 3]) == [x, y]
    persisted = dask.delayed(sum)([1])  # any collection: its graph's Future values count
    assert futures_in(persisted) == []


def test_futures_inside_a_graph_are_keys_outside_it() -> None:
    from dask._task_spec import Task, TaskRef

    from scaler.compat.dask.translation import run_nodes, translate

    holder = _Holder()
    x, y = holder.scattered("x"), holder.scattered("y")
    stand_ins = {"x": ("x-value",), "y": ("y-value",)}  # what the client's keys give: here plain literals
    graph = {"a": (_add, x, [y, 2]), "b": Task("b", _add, TaskRef("a"), k=x)}
    translation = translate(graph, ["b"], outside=stand_ins.get)
    assert translation.graph["x"] == ("x-value",) and translation.graph["y"] == ("y-value",)
    assert not any({"x", "y"} & set(members) for members in translation.fused.values())  # never fused
    task_a, task_b = translation.graph["a"], translation.graph["b"]
    assert task_a[0] is run_nodes and set(task_a[2:]) == {"x", "y"}  # references to them, as to any task
    assert task_b[0] is run_nodes and set(task_b[2:]) == {"a", "x"}
    pickle.dumps(translation.graph)  # no Future travels (a Future of this test's holder could not be pickled)
    assert run_nodes(task_a[1], *[{"x": 1, "y": 10}[key] for key in task_a[2:]]) == ((1, [10, 2]), {})
    with pytest.raises(GraphError, match="not in the graph"):
        translate(graph, ["b"], outside=lambda key: None)


def test_a_collection_of_futures_is_made_again_on_the_worker() -> None:
    from dask.delayed import Delayed

    holder = _Holder()
    x = holder.scattered("x")
    persisted = Delayed("x", {"x": x})
    call = prepare_call(_add, (persisted,), {}, _argument)
    assert call.fn is fill_slots and call.args[3:] == (("value-of", "x"),)
    (rebuilt,), _ = fill_slots(*call.args)  # what the worker runs
    assert isinstance(rebuilt, Delayed) and rebuilt.compute(scheduler="sync") == ("value-of", "x")


def test_released_key_leaves_the_table_once_no_future_holds_it() -> None:
    holder = _Holder()
    first = holder.scattered("x")
    second = Future("x", holder)  # type: ignore[arg-type]
    first.release()
    assert holder._keys.get("x") is second._state
    second.release()
    assert holder._keys.get("x") is None and second.status == "lost"
    with pytest.raises(KeyError):
        Future("x", holder)  # type: ignore[arg-type]


def test_pure_keys_name_the_call() -> None:
    assert task_key(_add, (1,), {}, True) == task_key(_add, (1,), {}, True)
    assert task_key(_add, (1,), {}, True) != task_key(_add, (2,), {}, True)
    assert task_key(_add, (1,), {}, False) != task_key(_add, (1,), {}, False)
    assert task_key(_add, (1,), {}, True).startswith("_add-")
    assert task_key(_add, (1,), {}, True, "INC").startswith("INC-")
    assert data_key([1, 2], True) == data_key([1, 2], True) and data_key(1, True).startswith("int-")


def test_resources_are_tags() -> None:
    assert tags_of_resources(None) is None
    assert tags_of_resources({"GPU": 1, "MEMORY": 0}) == {"GPU"}
    assert tags_of_resources({"GPU": 0}) is None
    with pytest.raises(ValueError):
        tags_of_resources({"GPU": "one"})  # type: ignore[dict-item]


def test_durations() -> None:
    assert durations.seconds(None) is None
    assert durations.seconds("10 ms") == pytest.approx(0.01)
    assert durations.seconds(2) == 2.0


class _Scheduler:
    def get(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called here")


def test_newest_default_client_is_dasks_scheduler_until_it_closes() -> None:
    before = dask.config.get("scheduler", None)
    first, second = _Scheduler(), _Scheduler()
    default.make_default(first)  # type: ignore[arg-type]
    default.make_default(second)  # type: ignore[arg-type]
    try:
        assert dask.config.get("scheduler") == second.get and default.default_client() is second
        assert dask.config.get("dataframe.shuffle.method") == "tasks"
        default.forget(second)  # type: ignore[arg-type]
        assert dask.config.get("scheduler") == first.get
    finally:
        default.forget(second)  # type: ignore[arg-type]
        default.forget(first)  # type: ignore[arg-type]
    assert dask.config.get("scheduler", None) == before
    with pytest.raises(ValueError, match="No clients found"):
        default.default_client()


def test_scattered_future_is_done_at_once() -> None:
    future = _Holder().scattered("x")
    assert future.done() and future.status == "finished" and future.exception() is None
    called: concurrent.futures.Future = concurrent.futures.Future()
    future.add_done_callback(called.set_result)
    assert called.result(1) is future
