"""The native Client API against a real scheduler and real worker processes."""

from __future__ import annotations

import concurrent.futures
import math
import operator
import pickle
import threading
import time
import traceback
from typing import Any

import cloudpickle
import pytest

from scaler import Client, ScalerFuture, SchedulerClusterCombo, Serializer
from scaler.errors import ConnectionFailedError, ProtectedModeError, SerializationError


def raise_value_error(message: str) -> None:
    raise ValueError(message)


def sleep_then_return(seconds: float, value: Any) -> Any:
    time.sleep(seconds)
    return value


def returns_unpicklable() -> Any:
    return threading.Lock()


def test_submit_returns_a_standard_future(client: Client) -> None:
    future = client.submit(math.sqrt, 16)
    assert isinstance(future, ScalerFuture)
    assert isinstance(future, concurrent.futures.Future)
    assert future.result(timeout=30) == 4.0
    assert future.done() and not future.cancelled()
    assert future.exception() is None


def test_map_returns_results_in_order(client: Client) -> None:
    results = client.map(math.sqrt, [(i,) for i in range(100)])
    assert results == [math.sqrt(i) for i in range(100)]
    assert round(sum(results), 2) == 661.46


def test_map_of_100k_noop_tasks_completes_correctly(client: Client) -> None:
    arguments = list(range(100_000))
    assert client.map(operator.neg, [(i,) for i in arguments]) == [-i for i in arguments]


def test_map_with_several_arguments_and_mixed_arity(client: Client) -> None:
    assert client.map(pow, [(2, 3), (3, 2), (2, 5, 7)]) == [8, 9, pow(2, 5, 7)]


def test_map_rejects_items_that_are_not_argument_tuples(client: Client) -> None:
    with pytest.raises(TypeError, match="argument tuples"):
        client.map(math.sqrt, [1, 2, 3])


def test_keyword_arguments(client: Client) -> None:
    def combine(a: int, b: int = 0, *, c: int = 0) -> tuple[int, int, int]:
        return a, b, c

    assert client.submit(combine, 1, c=3).result(timeout=30) == (1, 0, 3)
    assert client.submit(combine, a=1, b=2).result(timeout=30) == (1, 2, 0)


def test_wait_as_completed_and_callbacks(client: Client) -> None:
    futures = [client.submit(sleep_then_return, 0.05 * (i % 3), i) for i in range(12)]
    done, not_done = concurrent.futures.wait(futures, timeout=30)
    assert len(done) == 12 and not not_done
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures, timeout=30)) == list(range(12))

    called = threading.Event()
    seen: list[Any] = []
    future = client.submit(sleep_then_return, 0.1, "x")
    future.add_done_callback(lambda f: (seen.append(f.result()), called.set()))
    assert called.wait(30)
    assert seen == ["x"]


def test_task_exception_keeps_type_and_remote_traceback(client: Client) -> None:
    future = client.submit(raise_value_error, "bad input 42")
    with pytest.raises(ValueError, match="bad input 42") as caught:
        future.result(timeout=30)
    printed = "".join(traceback.format_exception(caught.value))
    assert "raise_value_error" in printed  # the remote frame is visible when printed
    assert "raise ValueError(message)" in printed
    assert isinstance(future.exception(), ValueError)
    # the worker and the scheduler carry on
    assert client.submit(operator.add, 1, 2).result(timeout=30) == 3


def test_map_raises_the_first_failure(client: Client) -> None:
    def maybe_fail(i: int) -> int:
        if i == 7:
            raise KeyError(i)
        return i

    with pytest.raises(KeyError):
        client.map(maybe_fail, [(i,) for i in range(20)])
    assert client.map(abs, [(-1,), (-2,)]) == [1, 2]


def test_non_callable_is_a_type_error_at_the_call(client: Client) -> None:
    with pytest.raises(TypeError, match="callable"):
        client.submit(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        client.map("abs", [(1,)])  # type: ignore[arg-type]


def test_unserializable_argument_fails_at_the_call(client: Client) -> None:
    with pytest.raises((TypeError, pickle.PicklingError)):
        client.submit(id, threading.Lock())


def test_unserializable_result_names_the_function(client: Client) -> None:
    future = client.submit(returns_unpicklable)
    with pytest.raises(SerializationError, match="returns_unpicklable"):
        future.result(timeout=30)
    assert client.submit(operator.mul, 6, 7).result(timeout=30) == 42


class TaggingSerializer(Serializer):
    """Every payload carries a tag, so a payload that skipped this serializer fails to load."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        return b"TAG:" + cloudpickle.dumps(obj)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        assert bytes(payload[:4]) == b"TAG:", "payload was not made by TaggingSerializer"
        return cloudpickle.loads(payload[4:])


def test_custom_serializer_is_used_for_function_arguments_and_result(combo: SchedulerClusterCombo) -> None:
    with Client(address=combo.get_address(), serializer=TaggingSerializer()) as client:
        assert client.submit(operator.add, 2, 3).result(timeout=30) == 5
        assert client.map(operator.add, [(1, 1), (2, 2)]) == [2, 4]

        def result_is_tagged(x: int) -> bytes:
            return TaggingSerializer.serialize(x)

        # The worker used our serializer for the result: a round trip through it once more is still tagged.
        assert client.submit(result_is_tagged, 9).result(timeout=30)[:4] == b"TAG:"


def test_cancel_a_queued_task_and_it_never_runs(client: Client, tmp_path) -> None:
    marker = tmp_path / "ran"

    def touch(path: str) -> None:
        open(path, "w").close()

    blockers = [client.submit(time.sleep, 1.0) for _ in range(2)]  # both workers busy
    queued = client.submit(touch, str(marker))
    assert queued.cancel() is True
    assert queued.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        queued.result(timeout=5)
    done, _ = concurrent.futures.wait([queued], timeout=5)
    assert queued in done
    for blocker in blockers:
        blocker.result(timeout=30)
    time.sleep(0.3)
    assert not marker.exists()


def test_cancel_of_a_running_or_finished_task_returns_false(client: Client) -> None:
    running = client.submit(time.sleep, 0.5)
    time.sleep(0.2)
    assert running.cancel() is False
    assert running.result(timeout=30) is None
    assert running.cancel() is False


def touch_then_sleep(path: str, seconds: float, value: Any) -> Any:
    open(path, "w").close()
    time.sleep(seconds)
    return value


def test_a_refused_cancel_does_not_end_a_result_wait_in_another_thread(client: Client, tmp_path) -> None:
    started = tmp_path / "started"
    future = client.submit(touch_then_sleep, str(started), 2.0, "value")
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started.exists(), "the task did not start"
    outcomes: list[Any] = []

    def wait_for_result() -> None:
        try:
            outcomes.append(future.result(timeout=60))
        except BaseException as error:  # noqa: B036 - what the waiting thread met is the answer
            outcomes.append(error)

    waiter = threading.Thread(target=wait_for_result)
    waiter.start()
    time.sleep(0.2)  # the waiter is in result() by now
    assert future.cancel() is False  # the task runs: its worker refuses the cancel
    waiter.join(60)
    assert outcomes == ["value"]


def test_clear_cancels_unfinished_work_and_client_stays_usable(client: Client) -> None:
    slow = [client.submit(time.sleep, 0.5) for _ in range(10)]
    client.clear()
    assert all(f.done() for f in slow)
    assert any(f.cancelled() for f in slow)
    assert client.submit(operator.add, 2, 2).result(timeout=30) == 4


def test_disconnect_then_submit_is_an_error(combo: SchedulerClusterCombo) -> None:
    client = Client(address=combo.get_address())
    client.disconnect()
    client.disconnect()  # twice is fine
    with pytest.raises(ConnectionFailedError, match="disconnected"):
        client.submit(abs, 1)


def test_shutdown_is_refused_in_protected_mode(combo: SchedulerClusterCombo) -> None:
    client = Client(address=combo.get_address())
    with pytest.raises(ProtectedModeError, match="protected"):
        client.shutdown()
    with Client(address=combo.get_address()) as other:
        assert other.submit(abs, -3).result(timeout=30) == 3


def test_shutdown_stops_an_unprotected_scheduler() -> None:
    with SchedulerClusterCombo(n_workers=1, protected=False, logging_level="WARNING") as cluster:
        client = Client(address=cluster.get_address())
        assert client.submit(abs, -1).result(timeout=30) == 1
        client.shutdown()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and cluster._processes[0].poll() is None:
            time.sleep(0.1)
        assert cluster._processes[0].poll() == 0, "the scheduler should exit after an accepted shutdown"


def test_client_is_a_context_manager_and_many_clients_share_a_cluster(combo: SchedulerClusterCombo) -> None:
    clients = [Client(address=combo.get_address()) for _ in range(3)]
    try:
        futures = [c.submit(operator.mul, i, 10) for i, c in enumerate(clients)]
        assert [f.result(timeout=30) for f in futures] == [0, 10, 20]
    finally:
        for c in clients:
            c.disconnect()
