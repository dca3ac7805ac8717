"""joblib's "scaler" backend against real schedulers and workers: what joblib and scikit-learn users rely on."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Iterator

import joblib
import psutil
import pytest
from joblib import Parallel, delayed, parallel_backend, parallel_config

from scaler import Client, SchedulerClusterCombo
from scaler.compat import cluster_choice
from scaler.compat.cluster_choice import use
from scaler.compat.joblib import ScalerBackend
from scaler.errors import ConnectionFailedError

GATE_LIMIT_SECONDS = 20.0


class CustomError(Exception):
    pass


def fail_on(value: int, bad: int) -> int:
    if value == bad:
        raise CustomError(f"bad value {value}")
    return value


def gated(gate: str, marks_directory: str, name: Any, limit_seconds: float = GATE_LIMIT_SECONDS) -> Any:
    """Wait until the test opens the gate, then leave a mark (a mark means the call ran)."""
    deadline = time.monotonic() + limit_seconds
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    pathlib.Path(marks_directory, str(name)).touch()
    return name


def started_then_gated(gate: str, marks_directory: str, index: int) -> int:
    pathlib.Path(marks_directory, f"started-{index}").touch()
    return gated(gate, marks_directory, index)


def fail_first_then_gated(gate: str, marks_directory: str, index: int) -> int:
    if index == 0:
        raise CustomError("the first call fails")
    return gated(gate, marks_directory, index)


def blas_threads(array: Any) -> list[int]:
    """The width of each BLAS/OpenMP pool in this process; `array` makes numpy load before the batch starts."""
    from threadpoolctl import threadpool_info

    return [pool["num_threads"] for pool in threadpool_info()]


def ancestor_pids() -> list[int]:
    return [parent.pid for parent in psutil.Process().parents()]


def nested_sums(size: int) -> tuple[int, int, str, bool]:
    """Runs in a task: a nested Parallel with joblib's nested default, and one that names "scaler"."""
    from joblib import Parallel, delayed, parallel_config
    from joblib.parallel import get_active_backend

    from scaler.compat import cluster_choice

    default_nested = sum(Parallel(n_jobs=2)(delayed(abs)(-j) for j in range(size)))
    with parallel_config(backend="scaler"):
        named = sum(Parallel(n_jobs=-1)(delayed(abs)(-j) for j in range(size)))
    return default_nested, named, type(get_active_backend()[0]).__name__, cluster_choice._embedded is None


@pytest.fixture
def chosen(client: Client) -> Iterator[Client]:
    """The module's cluster, chosen the way users choose it."""
    with use(client):
        yield client


@pytest.fixture
def gate(tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
    marks = tmp_path / "marks"
    marks.mkdir()
    path = tmp_path / "gate"
    try:
        yield str(path), marks
    finally:
        path.touch()  # no gated task waits past the test


def run_python(code: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


# ---------------------------------------------------------------------------------------------- registering


def test_import_scaler_registers_the_backend_without_importing_joblib_early() -> None:
    output = run_python(
        "import sys\n"
        "import scaler\n"
        "print('joblib imported by scaler:', 'joblib' in sys.modules)\n"
        "import joblib\n"
        "from joblib.parallel import BACKENDS\n"
        "print('registered:', BACKENDS.get('scaler'))\n"
        "print('hook left behind:', any('Joblib' in type(f).__name__ for f in sys.meta_path))\n"
    )
    assert "joblib imported by scaler: False" in output
    assert "registered: <class 'scaler.compat.joblib.backend.ScalerBackend'>" in output
    assert "hook left behind: False" in output
    output = run_python(
        "import joblib\n"
        "import scaler.compat.joblib\n"
        "from joblib.parallel import BACKENDS\n"
        "print('registered:', BACKENDS.get('scaler'))\n"
    )
    assert "registered: <class 'scaler.compat.joblib.backend.ScalerBackend'>" in output


# ---------------------------------------------------------------------------------------------- basics


def test_parallel_config_and_parallel_backend_give_ordered_results(chosen: Client) -> None:
    expected = [i * i for i in range(500)]
    with parallel_config(backend="scaler"):
        assert Parallel(n_jobs=2)(delayed(pow)(i, 2) for i in range(500)) == expected
        assert Parallel()(delayed(pow)(i, 2) for i in range(500)) == expected  # n_jobs=None
    with parallel_backend("scaler"):
        assert Parallel(n_jobs=-1)(delayed(pow)(i, 2) for i in range(500)) == expected
    assert Parallel(backend="scaler", n_jobs=2)(delayed(pow)(i, 2) for i in range(500)) == expected


def test_n_jobs_is_read_against_the_clusters_capacity() -> None:
    with parallel_config(backend="scaler", n_workers=5):
        assert joblib.effective_n_jobs(-1) == 5
        assert joblib.effective_n_jobs(None) == 5
        assert joblib.effective_n_jobs(-2) == 4
        assert joblib.effective_n_jobs(-10) == 1
        assert joblib.effective_n_jobs(3) == 3
        assert joblib.effective_n_jobs(100) == 100  # more than the hint: queued, the scheduler balances
        with pytest.raises(ValueError, match="n_jobs == 0"):
            Parallel(n_jobs=0)(delayed(abs)(i) for i in range(3))
    with parallel_config(backend="scaler"):
        assert joblib.effective_n_jobs(-1) == os.cpu_count()
    with pytest.raises(ValueError, match="n_workers"):
        parallel_config(backend="scaler", n_workers=0)
    with pytest.raises(TypeError):
        parallel_config(backend="scaler", n_wokers=4)


def test_n_jobs_1_runs_in_the_caller_as_with_every_backend(chosen: Client) -> None:
    with parallel_config(backend="scaler"):
        assert Parallel(n_jobs=1)(delayed(os.getpid)() for _ in range(3)) == [os.getpid()] * 3
        assert set(Parallel(n_jobs=2)(delayed(os.getpid)() for _ in range(3))).isdisjoint({os.getpid()})


def test_auto_batch_size_puts_many_tiny_calls_in_one_task(chosen: Client) -> None:
    backend = ScalerBackend()
    count = 5000
    with parallel_config(backend=backend):
        assert Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(count)) == list(range(count))
    assert 0 < backend.tasks_submitted < count // 5


def test_a_reused_backend_starts_each_call_with_batches_of_one_call(chosen: Client) -> None:
    """As joblib's process backends do: the batch size a call of tiny calls grew to is not the next call's, whose
    calls may be slow (a batch of 512 of them would run on one worker while the others idle)."""
    backend = ScalerBackend()
    with parallel_config(backend=backend):
        assert Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(5000)) == list(range(5000))
        before = backend.tasks_submitted
        assert Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(6)) == list(range(6))
    assert backend.tasks_submitted - before == 6, "each of the six calls is a task of its own"


def test_exceptions_keep_their_type(chosen: Client) -> None:
    with parallel_config(backend="scaler"):
        with pytest.raises(CustomError, match="bad value 7"):
            Parallel(n_jobs=2)(delayed(fail_on)(i, 7) for i in range(20))
        with pytest.raises(ZeroDivisionError):
            Parallel(n_jobs=2)(delayed(divmod)(1, i) for i in range(-3, 3))
        # the backend stays usable after an error
        assert Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(5)) == [0, 1, 2, 3, 4]


def test_return_as_generator_and_generator_unordered(chosen: Client) -> None:
    with parallel_config(backend="scaler"):
        ordered = Parallel(n_jobs=2, return_as="generator")(delayed(pow)(i, 2) for i in range(100))
        assert not isinstance(ordered, list)
        assert list(ordered) == [i * i for i in range(100)]
        unordered = Parallel(n_jobs=2, return_as="generator_unordered")(delayed(pow)(i, 2) for i in range(100))
        assert sorted(unordered) == [i * i for i in range(100)]
        results = Parallel(n_jobs=2, return_as="generator", batch_size=1)(delayed(fail_on)(i, 3) for i in range(6))
        received: list[int] = []
        with pytest.raises(CustomError):
            for result in results:
                received.append(result)
        assert received == list(range(len(received))) and len(received) <= 3  # joblib raises as soon as it knows


def slow_at(index: int, slow_index: int, gate: str, marks_directory: str) -> int:
    """The call at `slow_index` waits for the gate; every other call returns at once."""
    if index == slow_index:
        # Long enough for a loaded machine to hand back the fast results, which takes seconds.
        return gated(gate, marks_directory, index, limit_seconds=60)
    return index


@pytest.mark.parametrize("n_jobs", [2, 4])
def test_generator_unordered_hands_back_the_fast_results_before_a_slow_one(
    chosen: Client, gate: tuple[str, pathlib.Path], n_jobs: int
) -> None:
    path, marks = gate
    count = 10
    with parallel_config(backend="scaler"):
        # One call per batch: joblib's automatic batching grows batches once calls prove fast, and a batch
        # holding the slow call and fast ones could not hand the fast ones back early whatever we did.
        results = Parallel(n_jobs=n_jobs, return_as="generator_unordered", batch_size=1)(
            delayed(slow_at)(i, 1, path, str(marks)) for i in range(count)
        )
        # The slow call runs on one worker until the gate opens; calls queued behind it there must
        # move to the other worker, or they come out only after it (when the gate gives up waiting).
        fast = [next(results) for _ in range(count - 1)]
        assert not os.listdir(marks), "the slow call ended before the fast results were all handed back"
        pathlib.Path(path).touch()
        assert sorted(fast) == [i for i in range(count) if i != 1]
        assert list(results) == [1]


def test_timeout(chosen: Client, gate: tuple[str, pathlib.Path]) -> None:
    path, marks = gate
    with parallel_config(backend="scaler"):
        with pytest.raises((TimeoutError, multiprocessing.TimeoutError)):  # joblib raises multiprocessing's
            Parallel(n_jobs=2, timeout=0.3)(delayed(gated)(path, str(marks), i) for i in range(4))
    pathlib.Path(path).touch()
    with parallel_config(backend="scaler"):
        assert Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(4)) == [0, 1, 2, 3]


def test_giving_up_stops_the_running_calls_as_loky_does(chosen: Client, gate: tuple[str, pathlib.Path]) -> None:
    """joblib tells the user that the calls still running when it gave up were cancelled, and loky kills them.
    Left running, they would hold both workers, and the next call would wait behind them."""
    path, marks = gate
    with parallel_config(backend="scaler"):
        results = Parallel(n_jobs=2, batch_size=1, return_as="generator_unordered")(
            delayed(started_then_gated)(path, str(marks), i) for i in range(2)
        )
        deadline = time.monotonic() + GATE_LIMIT_SECONDS
        while len(os.listdir(marks)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(os.listdir(marks)) == ["started-0", "started-1"], "both calls run, one on each worker"
        with pytest.warns(UserWarning, match="still being processed by the workers have been cancelled"):
            results.close()  # abandoned: joblib gives up on the call
        # The gated calls end only with the gate (shut until the test ends) or their limit.
        assert Parallel(n_jobs=2, batch_size=1)(delayed(abs)(-i) for i in range(4)) == [0, 1, 2, 3]
    assert sorted(os.listdir(marks)) == ["started-0", "started-1"], "they were stopped, not waited for"


def test_pre_dispatch_bounds_what_is_read_from_the_input(chosen: Client, gate: tuple[str, pathlib.Path]) -> None:
    path, marks = gate
    read: list[int] = []

    def calls(count: int) -> Iterator[Any]:
        for i in range(count):
            read.append(i)
            yield delayed(gated)(path, str(marks), i)

    with parallel_config(backend="scaler"):
        results = Parallel(n_jobs=2, pre_dispatch=3, batch_size=1, return_as="generator")(calls(10))
        assert len(read) == 3  # no call can finish while the gate is shut, so nothing more was dispatched
        pathlib.Path(path).touch()
        assert list(results) == list(range(10))
        assert len(read) == 10
        read.clear()
        assert Parallel(n_jobs=2, pre_dispatch="all")(delayed(abs)(i) for i in range(10)) == list(range(10))


def test_an_error_aborts_and_cancels_the_queued_tasks(chosen: Client, gate: tuple[str, pathlib.Path]) -> None:
    path, marks = gate
    count = 20
    with parallel_config(backend="scaler"):
        with pytest.raises(CustomError, match="first call fails"):
            Parallel(n_jobs=2, batch_size=1, pre_dispatch="all")(
                delayed(fail_first_then_gated)(path, str(marks), i) for i in range(count)
            )
    time.sleep(0.5)  # the cancels are on their way; only then let the running calls end
    pathlib.Path(path).touch()
    with parallel_config(backend="scaler"):  # more work through both workers: any survivor has run by now
        assert Parallel(n_jobs=2, batch_size=1)(delayed(abs)(-i) for i in range(20)) == list(range(20))
    assert len(os.listdir(marks)) <= 2  # the calls that were already running, one per worker


def test_what_cannot_be_sent_fails_the_call_with_its_own_error(chosen: Client) -> None:
    with parallel_config(backend="scaler"):
        with pytest.raises(Exception, match="lock"):
            Parallel(n_jobs=2)(delayed(id)(item) for item in [1, threading.Lock()])
        assert Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(4)) == [0, 1, 2, 3]


def test_a_client_gone_while_joblib_dispatches_from_a_callback_fails_the_call(combo: SchedulerClusterCombo) -> None:
    client = Client(address=combo.get_address(), timeout_seconds=30)

    def calls() -> Iterator[Any]:
        for i in range(100):
            if i == 20:  # read by joblib on the backend's callback thread, after batches completed
                client.disconnect()
            yield delayed(abs)(-i)

    with use(client), parallel_config(backend="scaler"):
        # One batch in flight, so the failed submit is the only failure. With timeout, a batch lost
        # between joblib's dispatch and our submit would end as TimeoutError rather than hang.
        with pytest.raises(ConnectionFailedError, match="disconnected"):
            Parallel(n_jobs=2, batch_size=1, pre_dispatch=1, timeout=10)(calls())


def test_a_lost_scheduler_fails_the_call_instead_of_hanging(tmp_path: pathlib.Path) -> None:
    gate, marks = tmp_path / "gate", tmp_path / "marks"
    marks.mkdir()
    with SchedulerClusterCombo(n_workers=1, logging_level="CRITICAL") as private:
        client = Client(address=private.get_address(), timeout_seconds=3, heartbeat_interval_seconds=0.5)
        killer = threading.Timer(1.0, os.kill, (private.scheduler_pid, signal.SIGKILL))
        try:
            with use(client), parallel_config(backend="scaler"):
                killer.start()
                with pytest.raises(ConnectionFailedError):
                    Parallel(n_jobs=2, batch_size=1)(delayed(gated)(str(gate), str(marks), i) for i in range(6))
        finally:
            killer.join()
            gate.touch()
            client.disconnect()


def test_nested_parallel_inside_tasks_runs_there_without_deadlock(chosen: Client) -> None:
    with parallel_config(backend="scaler"):
        # As many outer tasks as workers and more: every worker is busy with a task that waits on a nested call.
        results = Parallel(n_jobs=2, batch_size=1)(delayed(nested_sums)(size) for size in (10, 20, 30, 40))
    for size, (default_nested, named, active_backend, no_cluster_started) in zip((10, 20, 30, 40), results):
        assert default_nested == named == sum(range(size))
        assert active_backend == "ThreadingBackend"
        assert no_cluster_started


LOKY_NESTING_SCRIPT = """
import scaler.compat.joblib
from joblib import Parallel, delayed, parallel_config


def nested(size):
    return sum(Parallel(n_jobs=2, backend="scaler")(delayed(abs)(-i) for i in range(size)))


def nested_after_registering(size):
    scaler.compat.joblib.register()
    return nested(size)


if __name__ == "__main__":
    try:
        Parallel(n_jobs=2, backend="loky")(delayed(nested)(size) for size in (5, 10))
    except ValueError as error:
        print("nothing done:", error)
    # Each way below starts loky workers of its own: loky reuses workers only for the same settings.
    with parallel_config(backend="loky", initializer=scaler.compat.joblib.register):
        print("initializer:", Parallel(n_jobs=2)(delayed(nested)(size) for size in (5, 10)))
    print("registered in the call:", Parallel(n_jobs=2, backend="loky")(
        delayed(nested_after_registering)(size) for size in (5, 10)
    ))
"""


def test_scaler_inside_loky_workers_needs_registering_there(
    combo: SchedulerClusterCombo, tmp_path: pathlib.Path, python_env: dict[str, str]
) -> None:
    """loky's workers are new interpreters that never imported scaler: the README's two ways, and the error without."""
    script = tmp_path / "nested_in_loky.py"
    script.write_text(LOKY_NESTING_SCRIPT)
    # The workers inherit the environment, so SCALER_ADDRESS leads them to the same cluster.
    environment = dict(python_env, SCALER_ADDRESS=combo.get_address())
    completed = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=100, env=environment, check=False
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0].startswith("nothing done: Invalid backend: scaler"), completed.stdout
    assert lines[1:] == ["initializer: [10, 45]", "registered in the call: [10, 45]"]


def test_verbose_prints_progress(chosen: Client, capsys: pytest.CaptureFixture[str]) -> None:
    with parallel_config(backend="scaler"):
        assert Parallel(n_jobs=2, verbose=10)(delayed(abs)(-i) for i in range(50)) == list(range(50))
    printed = capsys.readouterr().err
    assert "Using backend ScalerBackend with 2 concurrent workers" in printed
    assert "Done  50 out of  50" in printed


def test_thread_pools_in_workers_are_limited_while_a_batch_runs(chosen: Client) -> None:
    import numpy

    with parallel_config(backend="scaler"):
        widths = Parallel(n_jobs=2)(delayed(blas_threads)(numpy.zeros(1)) for _ in range(4))
    assert widths and all(width == [1] * len(width) and width for width in widths)
    with parallel_config(backend="scaler", inner_max_num_threads=2):
        widths = Parallel(n_jobs=2)(delayed(blas_threads)(numpy.zeros(1)) for _ in range(4))
    assert all(width == [2] * len(width) and width for width in widths)


# ---------------------------------------------------------------------------------------------- which cluster


def test_scaler_address_then_an_embedded_cluster(combo: SchedulerClusterCombo, monkeypatch: pytest.MonkeyPatch) -> None:
    use.reset()
    monkeypatch.setenv(cluster_choice.ADDRESS_ENVIRONMENT_VARIABLE, combo.get_address())
    try:
        with parallel_config(backend="scaler"):
            ancestors = Parallel(n_jobs=2)(delayed(ancestor_pids)() for _ in range(2))
        assert all(combo.cluster_pid in pids for pids in ancestors)

        monkeypatch.delenv(cluster_choice.ADDRESS_ENVIRONMENT_VARIABLE)
        with parallel_config(backend="scaler"):
            ancestors = Parallel(n_jobs=2)(delayed(ancestor_pids)() for _ in range(2))
        embedded = cluster_choice._embedded
        assert embedded is not None
        assert all(embedded.cluster_pid in pids and combo.cluster_pid not in pids for pids in ancestors)
    finally:
        cluster_choice._shutdown_embedded()  # what the atexit hook does: the clients, then the cluster
    assert cluster_choice._embedded is None


# ---------------------------------------------------------------------------------------------- scikit-learn


def test_scikit_learn_gives_the_same_scores_as_the_default_backend(chosen: Client) -> None:
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, cross_val_score
    from sklearn.tree import DecisionTreeClassifier
    from threadpoolctl import threadpool_limits

    features, labels = load_iris(return_X_y=True)
    grid = {"C": [0.1, 1.0, 10.0]}

    def search(n_jobs: int) -> Any:
        return GridSearchCV(LogisticRegression(max_iter=500), grid, cv=3, n_jobs=n_jobs).fit(features, labels)

    # The default backend; n_jobs=1 keeps loky's worker processes out of this test. One BLAS thread,
    # as in the workers: on two cores a two-thread pool stalls whenever the cluster takes a core.
    with threadpool_limits(limits=1):
        local = search(n_jobs=1)
        local_scores = cross_val_score(DecisionTreeClassifier(random_state=0), features, labels, cv=4, n_jobs=1)
    backend = ScalerBackend()  # the "scaler" backend, kept at hand to count the tasks it sent
    with parallel_config(backend=backend):
        remote = search(n_jobs=-1)
        remote_scores = cross_val_score(DecisionTreeClassifier(random_state=0), features, labels, cv=4, n_jobs=-1)
    assert backend.tasks_submitted > 0, "scikit-learn did not run its fits on the cluster"
    with parallel_config(backend="scaler"):  # by name, as users write it
        named_scores = cross_val_score(DecisionTreeClassifier(random_state=0), features, labels, cv=4, n_jobs=-1)
    assert list(named_scores) == list(local_scores)
    assert list(remote.cv_results_["mean_test_score"]) == list(local.cv_results_["mean_test_score"])
    assert remote.best_params_ == local.best_params_
    assert list(remote_scores) == list(local_scores)
