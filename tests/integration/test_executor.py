"""ScalerExecutor against real schedulers and workers: the concurrent.futures.Executor contract."""

from __future__ import annotations

import concurrent.futures
import gc
import os
import pathlib
import signal
import threading
import time
import weakref
from typing import Any, Iterator

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.compat import cluster_choice
from scaler.compat.cluster_choice import use
from scaler.compat.futures import BrokenScalerExecutor, ScalerExecutor
from scaler.errors import ConnectionFailedError

# How long a gated task waits for its gate at most, so that a failing test cannot leave it running.
GATE_LIMIT_SECONDS = 20.0


class CustomError(Exception):
    pass


def combine(a: int, b: int = 0, *, c: int = 0) -> tuple[int, int, int]:
    return a, b, c


def fail_on(value: int, bad: int) -> int:
    if value == bad:
        raise CustomError(f"bad value {value}")
    return value


class Payload:
    """A result that can be watched with a weak reference (an int or a tuple cannot)."""

    def __init__(self, value: int) -> None:
        self.value = value


def make_payload(value: int) -> Payload:
    return Payload(value)


def gated(gate: str, started_directory: str, name: Any) -> Any:
    """Say it started, then wait until the test opens the gate: keeps a worker busy for as long as needed."""
    pathlib.Path(started_directory, str(name)).touch()
    deadline = time.monotonic() + GATE_LIMIT_SECONDS
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return name


def gated_mark(gate: str, marks_directory: str, name: Any) -> Any:
    """Wait for the gate, then leave a mark: a mark means the call ran."""
    deadline = time.monotonic() + GATE_LIMIT_SECONDS
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    pathlib.Path(marks_directory, str(name)).touch()
    return name


def wait_for(condition: Any, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


class Gate:
    """A file that gated tasks wait for, and a directory where they say they started."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.path = directory / "gate"
        self.started = directory / "started"
        self.started.mkdir()
        self.marks = directory / "marks"
        self.marks.mkdir()

    def open(self) -> None:
        self.path.touch()

    def open_later(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self.open)
        timer.start()
        return timer

    def open_now(self, timer: threading.Timer) -> None:
        """Open the gate at once instead of when `timer` (from open_later) would have."""
        timer.cancel()
        self.open()
        timer.join()

    def started_count(self) -> int:
        return len(os.listdir(self.started))

    def mark_count(self) -> int:
        return len(os.listdir(self.marks))


@pytest.fixture
def gate(tmp_path: pathlib.Path) -> Iterator[Gate]:
    opened = Gate(tmp_path)
    try:
        yield opened
    finally:
        opened.open()  # whatever happened, no gated task waits past the test


@pytest.fixture
def executor(client: Client) -> Iterator[ScalerExecutor]:
    with ScalerExecutor(client=client) as made:
        yield made


def occupy_both_workers(executor: ScalerExecutor, gate: Gate) -> list[concurrent.futures.Future]:
    """Two gated calls, and wait until both run: the module's cluster has two workers of one processor each."""
    blockers = [executor.submit(gated, str(gate.path), str(gate.started), f"blocker{i}") for i in range(2)]
    wait_for(lambda: gate.started_count() == 2)
    return blockers


# ---------------------------------------------------------------------------------------------- contract


def test_is_a_concurrent_futures_executor(executor: ScalerExecutor, combo: SchedulerClusterCombo) -> None:
    assert isinstance(executor, concurrent.futures.Executor)
    assert executor.address == combo.get_address()
    future = executor.submit(pow, 2, 10)
    assert isinstance(future, concurrent.futures.Future)
    assert future.result(timeout=30) == 1024
    assert future.done() and not future.cancelled() and future.exception() is None


def test_submit_passes_keyword_arguments(executor: ScalerExecutor) -> None:
    assert executor.submit(combine, 1, c=3).result(timeout=30) == (1, 0, 3)
    assert executor.submit(combine, a=1, b=2).result(timeout=30) == (1, 2, 0)


def test_exceptions_keep_their_type(executor: ScalerExecutor) -> None:
    future = executor.submit(fail_on, 7, 7)
    with pytest.raises(CustomError, match="bad value 7"):
        future.result(timeout=30)
    assert isinstance(future.exception(), CustomError)
    with pytest.raises(ZeroDivisionError):
        executor.submit(divmod, 1, 0).result(timeout=30)


def test_a_connection_error_raised_by_a_call_is_not_a_broken_executor(executor: ScalerExecutor) -> None:
    future = executor.submit(fail_with_connection_error)
    with pytest.raises(ConnectionFailedError) as caught:
        future.result(timeout=30)
    assert not isinstance(caught.value, BrokenScalerExecutor)
    assert executor.submit(abs, -1).result(timeout=30) == 1


def fail_with_connection_error() -> None:
    raise ConnectionFailedError("the call's own connection failed")


def test_map_is_lazy_and_ordered(executor: ScalerExecutor) -> None:
    results = executor.map(pow, [2, 3, 4, 5], [2, 2, 2])
    assert iter(results) is results and not isinstance(results, list)
    assert next(results) == 4
    assert list(results) == [9, 16]  # the shortest iterable ends it, as for map()
    assert list(executor.map(abs, [])) == []
    values = list(range(-500, 500))
    assert list(executor.map(abs, values)) == [abs(value) for value in values]


def test_map_raises_a_call_exception_when_its_result_is_reached(executor: ScalerExecutor) -> None:
    results = executor.map(fail_on, range(10), [5] * 10)
    assert [next(results) for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(CustomError, match="bad value 5"):
        next(results)


@pytest.mark.parametrize("chunksize", [1, 2])
def test_map_lets_go_of_each_result_once_handed_out(executor: ScalerExecutor, chunksize: int) -> None:
    """As CPython's executors since 3.9: a streaming map over large results does not hold what it yielded."""
    results = executor.map(make_payload, range(4), chunksize=chunksize)
    handed_out = []
    for expected in range(3):
        payload = next(results)
        assert payload.value == expected
        handed_out.append(weakref.ref(payload))
        del payload
        gc.collect()
        assert [ref() for ref in handed_out] == [None] * len(handed_out), "the iterator still holds a result"
    assert [payload.value for payload in results] == [3]


def test_map_chunksize_batches_calls_into_one_task_each(
    executor: ScalerExecutor, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    submitted: list[int] = []
    real_submit = client.submit

    def counting_submit(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        submitted.append(1)
        return real_submit(fn, *args, **kwargs)

    monkeypatch.setattr(client, "submit", counting_submit)
    assert list(executor.map(pow, range(100), [2] * 100, chunksize=7)) == [i * i for i in range(100)]
    assert len(submitted) == 15  # ceil(100 / 7)
    with pytest.raises(CustomError):
        list(executor.map(fail_on, range(30), [20] * 30, chunksize=8))
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="chunksize"):
            executor.map(abs, [1], chunksize=bad)  # type: ignore[arg-type]


def test_map_timeout(executor: ScalerExecutor, gate: Gate) -> None:
    results = executor.map(gated, [str(gate.path)] * 3, [str(gate.started)] * 3, range(3), timeout=0.3)
    with pytest.raises(concurrent.futures.TimeoutError):
        list(results)
    gate.open()
    assert list(executor.map(abs, [-1, -2])) == [1, 2]


def test_leaving_a_map_early_cancels_the_calls_not_run(executor: ScalerExecutor, gate: Gate) -> None:
    # Workers up first: run first in a module, the 0.3 s timeout could pass before any worker connected.
    assert executor.submit(abs, -1).result(timeout=30) == 1
    count = 20
    results = executor.map(gated_mark, [str(gate.path)] * count, [str(gate.marks)] * count, range(count), timeout=0.3)
    with pytest.raises(concurrent.futures.TimeoutError):
        next(results)
    time.sleep(0.5)  # the cancels are on their way; only then let the two running calls end
    gate.open()
    # Each worker runs its tasks in order, so once more work has been through both, the cancels were read.
    assert list(executor.map(abs, range(-20, 0))) == list(range(20, 0, -1))
    assert 1 <= gate.mark_count() <= 2


def test_a_map_iterator_dropped_unstarted_is_not_kept_and_its_calls_run(executor: ScalerExecutor, gate: Gate) -> None:
    results = executor.map(gated_mark, [str(gate.path)] * 3, [str(gate.marks)] * 3, range(3))
    assert len(executor._mapped) == 1
    del results
    assert len(executor._mapped) == 0
    gate.open()
    wait_for(lambda: gate.mark_count() == 3)


def test_map_rejects_what_cannot_be_sent_at_the_call(executor: ScalerExecutor) -> None:
    with pytest.raises(TypeError, match="callable"):
        executor.map(42, [1])  # type: ignore[arg-type]
    with pytest.raises(Exception):  # noqa: B017 - whatever the serializer raises for a lock
        executor.map(id, [1, threading.Lock()])
    assert list(executor.map(abs, [-3])) == [3]


def test_calls_the_function_cannot_take_fail_at_submit_and_map(executor: ScalerExecutor) -> None:
    with pytest.raises(TypeError, match="missing a required argument: 'a'"):
        executor.submit(combine)
    for chunksize in (1, 5):
        with pytest.raises(TypeError, match="map\\(\\) with 3 iterables: .*too many positional arguments"):
            executor.map(combine, [1], [2], [3], chunksize=chunksize)
    assert list(executor.map(combine, [1, 2], [3, 4], chunksize=2)) == [(1, 3, 0), (2, 4, 0)]


def test_wait_as_completed_and_callbacks_in_the_callers_process(executor: ScalerExecutor) -> None:
    futures = [executor.submit(pow, i, 2) for i in range(12)]
    done, not_done = concurrent.futures.wait(futures, timeout=30)
    assert len(done) == 12 and not not_done
    completed = concurrent.futures.as_completed(futures, timeout=30)
    assert sorted(f.result() for f in completed) == [i * i for i in range(12)]

    called = threading.Event()
    seen: list[Any] = []
    future = executor.submit(pow, 3, 3)
    future.add_done_callback(lambda f: (seen.append((os.getpid(), f.result())), called.set()))
    assert called.wait(30)
    assert seen == [(os.getpid(), 27)]
    late: list[Any] = []
    future.add_done_callback(lambda f: late.append(f.result()))  # already done: runs at once, here
    assert late == [27]


def test_cancel_of_a_queued_call(executor: ScalerExecutor, gate: Gate) -> None:
    blockers = occupy_both_workers(executor, gate)
    queued = executor.submit(gated_mark, str(gate.path), str(gate.marks), "queued")
    timer = gate.open_later(1.0)  # the processors read the cancel once their running call ends
    try:
        assert queued.cancel() is True
    finally:
        timer.join()
    assert queued.cancelled() and queued.done()
    with pytest.raises(concurrent.futures.CancelledError):
        queued.result(timeout=1)
    done, _ = concurrent.futures.wait([queued, *blockers], timeout=30)
    assert queued in done
    assert {f.result() for f in blockers} == {"blocker0", "blocker1"}
    assert queued in list(concurrent.futures.as_completed([queued], timeout=1))
    assert executor.submit(abs, -5).result(timeout=30) == 5
    assert gate.mark_count() == 0
    assert queued.cancel() is True and blockers[0].cancel() is False


# ---------------------------------------------------------------------------------------------- shutdown


def test_submit_after_shutdown_is_a_runtime_error(client: Client) -> None:
    with ScalerExecutor(client=client) as executor:
        future = executor.submit(pow, 2, 5)
    assert future.done() and future.result() == 32  # the with block waited
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(abs, 1)
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.map(abs, [1])
    executor.shutdown()  # twice is fine
    assert client.submit(abs, -2).result(timeout=30) == 2  # a given client stays the caller's


def test_shutdown_cancel_futures_cancels_the_queued_calls(client: Client, gate: Gate) -> None:
    executor = ScalerExecutor(client=client)
    blockers = occupy_both_workers(executor, gate)
    queued = [executor.submit(gated_mark, str(gate.path), str(gate.marks), i) for i in range(10)]
    mapped = executor.map(gated_mark, [str(gate.path)] * 5, [str(gate.marks)] * 5, range(10, 15))
    timer = gate.open_later(1.0)
    try:
        executor.shutdown(wait=True, cancel_futures=True)
    finally:
        timer.join()
    assert all(future.cancelled() for future in queued)
    assert [future.result() for future in blockers] == ["blocker0", "blocker1"]
    with pytest.raises(concurrent.futures.CancelledError):
        next(mapped)
    assert gate.mark_count() == 0


def test_shutdown_without_wait_returns_and_the_calls_still_finish(client: Client, gate: Gate) -> None:
    executor = ScalerExecutor(client=client)
    futures = [executor.submit(gated, str(gate.path), str(gate.started), i) for i in range(3)]
    executor.shutdown(wait=False)
    with pytest.raises(RuntimeError):
        executor.submit(abs, 1)
    assert not any(future.done() for future in futures)
    gate.open()
    assert [future.result(timeout=30) for future in futures] == [0, 1, 2]
    executor.shutdown(wait=True)  # joins what shutdown(wait=False) left running


# ---------------------------------------------------------------------------------------------- clusters


def test_embedded_cluster_is_owned_and_stopped_even_when_the_body_raises() -> None:
    # Only the trees of new children: the module's cluster may start a processor of its own meanwhile.
    before = {child.pid for child in psutil.Process().children()}
    with pytest.raises(ZeroDivisionError):
        with ScalerExecutor(n_workers=1) as executor:
            assert list(executor.map(pow, [2, 3], [3, 2])) == [8, 9]
            new_children = [child for child in psutil.Process().children() if child.pid not in before]
            started = {p.pid for child in new_children for p in [child, *child.children(recursive=True)]}
            assert started, "an embedded cluster runs as child processes"
            1 / 0  # noqa: B018
    still_running = []
    for pid in started:
        try:
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                still_running.append((pid, process.cmdline()))
        except psutil.NoSuchProcess:
            pass
    assert not still_running, f"left running: {still_running}"
    with pytest.raises(RuntimeError):
        executor.submit(abs, 1)


def test_no_address_follows_use_and_scaler_address(
    client: Client, combo: SchedulerClusterCombo, monkeypatch: pytest.MonkeyPatch
) -> None:
    with use(client):
        with ScalerExecutor() as executor:
            assert executor.address == combo.get_address()
            assert executor.submit(abs, -1).result(timeout=30) == 1
    assert client.submit(abs, -2).result(timeout=30) == 2  # a chosen client is not the executor's to close
    monkeypatch.setenv(cluster_choice.ADDRESS_ENVIRONMENT_VARIABLE, combo.get_address())
    try:
        with ScalerExecutor() as executor:
            assert executor.address == combo.get_address()
            assert list(executor.map(abs, [-1, -2])) == [1, 2]
    finally:
        cluster_choice._shutdown_embedded()  # disconnects the client cluster_choice made for that address


def test_an_address_gets_a_client_of_its_own(combo: SchedulerClusterCombo) -> None:
    with ScalerExecutor(combo.get_address()) as executor:
        assert executor.submit(pow, 3, 2).result(timeout=30) == 9
        own_client = executor._client
    assert not own_client.is_connected  # the executor made it, so it disconnected it


def test_arguments_that_cannot_go_together_fail_at_the_call(client: Client) -> None:
    with pytest.raises(TypeError, match="client="):
        ScalerExecutor(client)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        ScalerExecutor("tcp://127.0.0.1:1", client=client)
    with pytest.raises(TypeError, match="n_workers"):
        ScalerExecutor(client=client, n_workers=2)
    with pytest.raises(ValueError, match="n_workers"):
        ScalerExecutor(n_workers=0)
    with pytest.raises(TypeError, match="serializer"):
        ScalerExecutor(client=client, serializer=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="address"):
        ScalerExecutor("localhost:2345")


def test_a_lost_scheduler_breaks_the_executor_instead_of_hanging(tmp_path: pathlib.Path) -> None:
    gate = Gate(tmp_path)
    with SchedulerClusterCombo(n_workers=1, logging_level="CRITICAL") as private:
        client = Client(address=private.get_address(), timeout_seconds=3, heartbeat_interval_seconds=0.5)
        try:
            executor = ScalerExecutor(client=client)
            running = executor.submit(gated, str(gate.path), str(gate.started), "running")
            mapped = executor.map(gated, [str(gate.path)] * 2, [str(gate.started)] * 2, range(2))
            wait_for(lambda: gate.started_count() >= 1)
            os.kill(private.scheduler_pid, signal.SIGKILL)
            with pytest.raises(BrokenScalerExecutor) as caught:
                running.result(timeout=30)
            assert isinstance(caught.value, concurrent.futures.BrokenExecutor)
            assert isinstance(caught.value.__cause__, ConnectionFailedError)
            with pytest.raises(BrokenScalerExecutor):
                next(mapped)
            with pytest.raises(BrokenScalerExecutor):
                executor.submit(abs, 1)
            with pytest.raises(BrokenScalerExecutor):
                executor.map(abs, [1])
            executor.shutdown(wait=True)  # nothing left to wait for: returns
        finally:
            gate.open()
            client.disconnect()


# ---------------------------------------------------------------------------------------------- core


def test_cancel_of_a_running_task_answers_without_waiting_for_it(client: Client, gate: Gate) -> None:
    running = client.submit(gated, str(gate.path), str(gate.started), "running")
    wait_for(lambda: gate.started_count() == 1)
    timer = gate.open_later(5.0)  # as above: the running task ends only then
    try:
        assert running.cancel() is False
        assert not running.done(), "cancel() waited for the running task to finish"
    finally:
        gate.open_now(timer)  # cancel() has answered: nothing is left to wait for
        running.result(timeout=30)


def test_cancel_of_a_task_queued_behind_a_running_one_answers_at_once(client: Client, gate: Gate) -> None:
    executor = ScalerExecutor(client=client)
    blockers = occupy_both_workers(executor, gate)
    queued = client.submit(gated_mark, str(gate.path), str(gate.marks), "queued")
    # An upper bound for cancel() to answer on a loaded machine: the running tasks end only then.
    timer = gate.open_later(5.0)
    try:
        assert queued.cancel() is True
        assert not any(blocker.done() for blocker in blockers), "cancel() waited for the running tasks to end"
        assert queued.cancelled()
        gate.open_now(timer)  # cancel() has answered: the running tasks may end now
        for blocker in blockers:
            blocker.result(timeout=30)
        time.sleep(0.5)
        assert not pathlib.Path(gate.marks, "queued").exists(), "the cancelled call ran"
    finally:
        timer.join()
        executor.shutdown()
