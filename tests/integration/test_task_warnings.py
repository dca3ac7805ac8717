"""Warnings raised inside tasks reach the caller, through its own warning filters, on every entry point.

Each test runs real tasks on a real cluster and looks at what the caller's `warnings` machinery sees:
`pytest.warns`, `catch_warnings(record=True)`, and the "ignore", "error" and "default" actions.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import warnings
from typing import Iterator

import pytest

import scaler
from scaler import Client, SchedulerClusterCombo
from scaler.compat.cluster_choice import use
from scaler.compat.futures import ScalerExecutor
from scaler.worker.warning_recorder import MAX_WARNINGS_PER_TASK

pytestmark = pytest.mark.timeout(120)


class TaskWarning(UserWarning):
    pass


class CustomError(Exception):
    pass


def warn_and_return(value: int) -> int:
    warnings.warn(f"careful with {value}", TaskWarning, stacklevel=1)
    return value


WARN_LINE = inspect.getsourcelines(warn_and_return)[1] + 1


def warn_and_raise(value: int) -> int:
    warnings.warn(f"about to fail on {value}", RuntimeWarning, stacklevel=1)
    raise CustomError(f"failed on {value}")


def warn_deprecated(value: int) -> int:
    warnings.warn("old API", DeprecationWarning, stacklevel=1)
    return value


def warn_in_a_loop(repetitions: int, distinct: int) -> int:
    for _ in range(repetitions):
        warnings.warn("the same warning again", stacklevel=1)
    for index in range(distinct):
        warnings.warn(f"warning number {index}", stacklevel=1)
    return repetitions


def warn_but_ignore_inside(value: int) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.warn("the task itself silenced this", stacklevel=1)
    return value


def warn_from_a_local_class(value: int) -> int:
    class LocalWarning(DeprecationWarning):
        pass

    warnings.warn("from a class the client cannot find", LocalWarning, stacklevel=1)
    return value


def add(a: int, b: int) -> int:
    return a + b


def nested_warning(client: Client, value: int) -> int:
    return client.submit(warn_and_return, value).result() + 1


def caught(action) -> tuple[object, list[warnings.WarningMessage]]:
    """What `action()` returns, and every warning it let through, with all filters at "always"."""
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        value = action()
    return value, records


def messages_of(records: list[warnings.WarningMessage]) -> list[str]:
    return sorted(str(record.message) for record in records)


@pytest.fixture(scope="module")
def module_client(combo: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(address=combo.get_address(), timeout_seconds=30) as connected:
        yield connected


# ---------------------------------------------------------------------------------------------- native client


def test_a_warning_reaches_the_caller_of_result_with_its_category_text_and_place(client: Client) -> None:
    future = client.submit(warn_and_return, 7)
    concurrent.futures.wait([future], timeout=60)
    with pytest.warns(TaskWarning, match="careful with 7") as records:
        assert future.result() == 7
    (record,) = records
    assert record.category is TaskWarning
    assert record.filename == __file__
    assert record.lineno == WARN_LINE
    # Issued once: the next result() hands out the value alone.
    _, again = caught(future.result)
    assert again == []


def test_a_warning_before_the_task_raises_reaches_the_caller_too(client: Client) -> None:
    future = client.submit(warn_and_raise, 3)
    with pytest.warns(RuntimeWarning, match="about to fail on 3"):
        with pytest.raises(CustomError):
            future.result(timeout=60)


def test_exception_hands_out_the_warnings_as_result_does(client: Client) -> None:
    future = client.submit(warn_and_return, 4)
    with pytest.warns(TaskWarning, match="careful with 4"):
        assert future.exception(timeout=60) is None


def test_map_issues_the_warnings_of_every_task(client: Client) -> None:
    results, records = caught(lambda: client.map(warn_and_return, [(index,) for index in range(5)]))
    assert results == list(range(5))
    assert messages_of(records) == [f"careful with {index}" for index in range(5)]
    assert {record.category for record in records} == {TaskWarning}


def test_the_callers_filters_decide_ignore_and_error(client: Client) -> None:
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("ignore")
        assert client.submit(warn_and_return, 1).result(timeout=60) == 1
        assert client.map(warn_and_return, [(2,), (3,)]) == [2, 3]
    assert records == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", TaskWarning)
        with pytest.raises(TaskWarning, match="careful with 5"):
            client.submit(warn_and_return, 5).result(timeout=60)
        with pytest.raises(TaskWarning, match="careful with 6"):
            client.map(warn_and_return, [(6,)])


def test_the_default_action_shows_a_warning_once_per_place_as_locally(client: Client) -> None:
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("default")
        for _ in range(3):
            client.map(warn_and_return, [(1,), (1,)])
    assert messages_of(records) == ["careful with 1"]


def test_the_workers_default_filters_do_not_hide_what_the_caller_wants(client: Client) -> None:
    # A process's default filters ignore DeprecationWarning outside __main__; the caller chose "always".
    _, records = caught(lambda: client.submit(warn_deprecated, 1).result(timeout=60))
    assert [(record.category, str(record.message)) for record in records] == [(DeprecationWarning, "old API")]


def test_a_warning_the_task_silenced_itself_stays_silent(client: Client) -> None:
    _, records = caught(lambda: client.submit(warn_but_ignore_inside, 1).result(timeout=60))
    assert records == []


def test_a_category_the_client_cannot_find_becomes_its_nearest_known_base(client: Client) -> None:
    _, records = caught(lambda: client.submit(warn_from_a_local_class, 1).result(timeout=60))
    (record,) = records
    assert record.category is DeprecationWarning
    assert str(record.message) == (
        f"{__name__}.warn_from_a_local_class.<locals>.LocalWarning: from a class the client cannot find"
    )


def test_a_task_warning_in_a_loop_sends_each_distinct_warning_once_and_at_most_the_cap(client: Client) -> None:
    distinct = MAX_WARNINGS_PER_TASK + 10
    _, records = caught(lambda: client.submit(warn_in_a_loop, 100_000, distinct).result(timeout=60))
    texts = [str(record.message) for record in records]
    assert texts.count("the same warning again") == 1
    assert len(texts) == MAX_WARNINGS_PER_TASK + 1
    summary = records[-1]
    assert summary.category is RuntimeWarning
    assert "raised 11 more warning(s)" in texts[-1]


def test_warnings_in_a_quiet_graph_node_reach_the_caller_of_get(client: Client) -> None:
    graph = {"a": (warn_and_return, 1), "b": (warn_and_return, 2), "c": (add, "a", "b")}
    outcome, records = caught(lambda: client.get(graph, keys=["c"]))
    assert outcome == {"c": 3}
    assert messages_of(records) == ["careful with 1", "careful with 2"]


def test_warnings_of_a_graph_that_fails_reach_the_caller_before_the_error(client: Client) -> None:
    graph = {"a": (warn_and_return, 1), "b": (warn_and_raise, "a"), "c": (add, "b", 1)}
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        with pytest.raises(CustomError):
            client.get(graph, keys=["c"])
    assert messages_of(records) == ["about to fail on 1", "careful with 1"]


def test_a_nested_tasks_warning_reaches_the_top_caller() -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        with Client(address=cluster.get_address(), timeout_seconds=30) as nested_client:
            value, records = caught(lambda: nested_client.submit(nested_warning, nested_client, 2).result(timeout=90))
    assert value == 3
    assert messages_of(records) == ["careful with 2"]
    assert records[0].filename == __file__ and records[0].lineno == WARN_LINE


def warn_and_return_bytes(size: int) -> bytes:
    warnings.warn(f"made {size} bytes", TaskWarning, stacklevel=1)
    return b"w" * size


def test_warnings_stay_with_their_results_when_the_worker_splits_them_under_the_size_limits() -> None:
    """Results over the control frame limit go in several messages (and one over the frame limit fails):
    each task's warning must travel with its own outcome."""
    inline_result = 40 * 1024  # under 64 KiB: inside the control frame; 300 of them need many messages
    with SchedulerClusterCombo(
        n_workers=1, logging_level="WARNING", max_message_size_bytes=1024 * 1024, max_control_frame_bytes=512 * 1024,
    ) as cluster, Client(address=cluster.get_address(), timeout_seconds=30) as limited:
        results, records = caught(lambda: limited.map(warn_and_return_bytes, [(inline_result,)] * 300))
        too_large = limited.submit(warn_and_return_bytes, 2 * 1024 * 1024)
        concurrent.futures.wait([too_large], timeout=60)
        _, from_failure = caught(too_large.exception)
    assert results == [b"w" * inline_result] * 300
    assert messages_of(records) == [f"made {inline_result} bytes"] * 300
    assert messages_of(from_failure) == [f"made {2 * 1024 * 1024} bytes"]


# ---------------------------------------------------------------------------------------------- adapters


def test_dask_compute_with_scaler_get_issues_the_warnings_of_every_node(module_client: Client) -> None:
    dask = pytest.importorskip("dask")
    first = dask.delayed(warn_and_return)(1)
    second = dask.delayed(warn_and_return)(2)
    total = dask.delayed(add)(first, second)
    with use(module_client):
        (value,), records = caught(lambda: dask.compute(total, scheduler=scaler.get))
        with warnings.catch_warnings():
            warnings.simplefilter("error", TaskWarning)
            with pytest.raises(TaskWarning):
                dask.compute(dask.delayed(warn_and_return)(3), scheduler=scaler.get)
    assert value == 3
    assert messages_of(records) == ["careful with 1", "careful with 2"]
    assert {record.filename for record in records} == {__file__}


def test_joblib_parallel_issues_the_warnings_of_every_call(module_client: Client) -> None:
    joblib = pytest.importorskip("joblib")
    import scaler.compat.joblib  # noqa: F401  (registers the backend)

    def run() -> list[int]:
        return joblib.Parallel(n_jobs=2, backend="scaler")(joblib.delayed(warn_and_return)(i) for i in range(6))

    with use(module_client):
        results, records = caught(run)
        with warnings.catch_warnings():
            warnings.simplefilter("error", TaskWarning)
            with pytest.raises(TaskWarning):
                run()
    assert results == list(range(6))
    assert messages_of(records) == [f"careful with {index}" for index in range(6)]
    assert {record.category for record in records} == {TaskWarning}


def test_executor_futures_and_map_issue_the_warnings(module_client: Client) -> None:
    with ScalerExecutor(client=module_client) as executor:
        future = executor.submit(warn_and_return, 1)
        concurrent.futures.wait([future], timeout=60)
        value, from_submit = caught(future.result)
        failing = executor.submit(warn_and_raise, 2)
        concurrent.futures.wait([failing], timeout=60)
        error, from_failure = caught(failing.exception)
        mapped, from_map = caught(lambda: list(executor.map(warn_and_return, [3, 4], timeout=60)))
        chunked, from_chunks = caught(lambda: list(executor.map(warn_and_return, [5, 6, 7], chunksize=2)))
    assert value == 1 and messages_of(from_submit) == ["careful with 1"]
    assert isinstance(error, CustomError) and messages_of(from_failure) == ["about to fail on 2"]
    assert mapped == [3, 4] and messages_of(from_map) == ["careful with 3", "careful with 4"]
    assert chunked == [5, 6, 7] and messages_of(from_chunks) == ["careful with 5", "careful with 6", "careful with 7"]
