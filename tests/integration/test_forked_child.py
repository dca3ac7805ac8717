"""A Client, the adapters' cluster choice and the executor in a child forked from their process.

The child has copies of the parent's client, but not its I/O thread: work handed to the copy would
wait forever. What the user made (a Client, a ScalerExecutor) fails at once in the child, saying to
make a new one there; the adapters connect anew, to the cluster chosen in the parent. Every child here is forked
for real and waited for with a deadline, after which it is killed and the test fails: a hang.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from typing import Any, Callable, Iterator

import pytest
import zmq
from joblib import Parallel, delayed, parallel_config

from scaler import Client, SchedulerClusterCombo
from scaler.compat import cluster_choice
from scaler.compat.cluster_choice import use
from scaler.compat.futures import ScalerExecutor
from scaler.compat.joblib import ScalerBackend

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

CHILD_DEADLINE_SECONDS = 60.0


def _report(sender: multiprocessing.connection.Connection, function: Callable[..., Any], args: tuple) -> None:
    try:
        outcome: tuple = ("returned", function(*args))
    except BaseException as error:  # noqa: B036 - whatever the child meets is the answer
        outcome = ("raised", type(error).__name__, str(error))
    sender.send(outcome)


def in_forked_child(function: Callable[..., Any], *args: Any) -> tuple:
    """Run `function(*args)` in a child forked from this process: ("returned", value) or ("raised", type, text)."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_report, args=(sender, function, args))
    child.start()
    sender.close()
    try:
        if not receiver.poll(CHILD_DEADLINE_SECONDS):
            pytest.fail(f"the forked child did not answer within {CHILD_DEADLINE_SECONDS:g}s: it hangs")
        return receiver.recv()
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join(10)
        receiver.close()


def submit_and_wait(client: Client) -> int:
    return client.submit(abs, -1).result()


def map_and_wait(client: Client) -> list[int]:
    return client.map(abs, [(-1,), (-2,)])


def new_client_in_child(address: str) -> int:
    with Client(address=address, timeout_seconds=30) as client:
        return client.submit(abs, -3).result()


def scaler_sum(size: int) -> int:
    return sum(Parallel(n_jobs=2, backend="scaler")(delayed(abs)(-i) for i in range(size)))


def scaler_sum_with(backend: ScalerBackend, size: int) -> int:
    with parallel_config(backend=backend):
        return sum(Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(size)))


def executor_submit(executor: ScalerExecutor) -> int:
    return executor.submit(abs, -1).result()


def executor_map(executor: ScalerExecutor) -> list[int]:
    return list(executor.map(abs, [-1, -2]))


def executor_shutdown(executor: ScalerExecutor) -> str:
    executor.shutdown()
    return repr(executor)


@pytest.fixture
def by_environment(combo: SchedulerClusterCombo, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The module's cluster chosen through SCALER_ADDRESS, the way a deployment chooses it."""
    monkeypatch.setattr(cluster_choice, "_used", [])
    monkeypatch.setenv(cluster_choice.ADDRESS_ENVIRONMENT_VARIABLE, combo.get_address())
    try:
        yield combo.get_address()
    finally:
        client = cluster_choice._by_address.pop(combo.get_address(), None)
        if client is not None:
            client.disconnect()


# ---------------------------------------------------------------------------------------------- a user's Client


def test_a_client_made_in_the_parent_fails_at_once_in_a_forked_child(client: Client) -> None:
    assert client.submit(abs, -5).result(timeout=30) == 5  # the I/O thread has run: the child copies a live client
    for call in (submit_and_wait, map_and_wait):
        outcome = in_forked_child(call, client)
        assert outcome[:2] == ("raised", "ConnectionFailedError"), outcome
        assert "cannot be used in a forked child" in outcome[2] and "create a new Client in the child" in outcome[2]
    assert in_forked_child(new_client_in_child, client.address) == ("returned", 3)
    assert client.submit(abs, -6).result(timeout=30) == 6  # the children left the parent's client alone


def unpickle_and_submit(pickled: bytes) -> int:
    client = pickle.loads(pickled)
    try:
        return client.submit(abs, -7).result(timeout=30)
    finally:
        client.disconnect()


def test_a_client_unpickled_in_a_child_forked_while_another_thread_unpickles_one_connects(
    client: Client, combo: SchedulerClusterCombo
) -> None:
    """A task given "the client" rebuilds it from its pickle, one per process and settings, under a lock held
    while it connects: a child forked by another thread meanwhile must not inherit that lock held."""
    context = zmq.Context()
    silent = context.socket(zmq.ROUTER)  # a scheduler that never welcomes: the unpickling thread waits on it
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    reconnect, (settings,) = client.__reduce__()
    slow = dataclasses.replace(settings, address=f"tcp://127.0.0.1:{port}", timeout_seconds=3.0)
    ended: list[BaseException] = []

    def unpickle_slowly() -> None:
        try:
            reconnect(slow)
        except Exception as error:  # noqa: BLE001 - only its end matters here
            ended.append(error)

    unpickling = threading.Thread(target=unpickle_slowly, daemon=True)
    try:
        unpickling.start()
        assert silent.poll(30_000), "the unpickled client never said hello"  # it connects, holding the lock
        assert in_forked_child(unpickle_and_submit, pickle.dumps(client)) == ("returned", 7)
    finally:
        unpickling.join(30)
        silent.close(linger=0)
        context.term()
    assert not unpickling.is_alive() and [type(error).__name__ for error in ended] == ["ConnectionFailedError"]


# ---------------------------------------------------------------------------------------------- the adapters' choice


def test_forked_pool_workers_run_parallel_on_scaler(by_environment: str) -> None:
    """What a joblib "multiprocessing" child does (joblib's own test_nested_loop runs it in test_joblib_suite.py)."""
    assert scaler_sum(10) == 45  # the parent's client for SCALER_ADDRESS exists before the pool forks
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pending = pool.map_async(scaler_sum, [5, 10, 20])
        try:
            sums = pending.get(CHILD_DEADLINE_SECONDS)
        except multiprocessing.TimeoutError:
            pytest.fail(f"the pool's workers did not answer within {CHILD_DEADLINE_SECONDS:g}s: they hang")
    assert sums == [10, 45, 190]
    assert scaler_sum(5) == 10


def test_the_client_chosen_for_an_address_is_made_anew_in_a_forked_child(combo: SchedulerClusterCombo) -> None:
    with use(combo.get_address()):
        assert scaler_sum(10) == 45
        assert in_forked_child(scaler_sum, 10) == ("returned", 45)
        assert scaler_sum(10) == 45


def scaler_sum_and_client_name(size: int) -> tuple[int, str, bool]:
    """In the child: the adapters' sum, the name of the client they chose, and whether the parent's client works."""
    total = scaler_sum(size)
    chosen = cluster_choice.current_client()
    return total, chosen.name, chosen.is_connected


def test_a_client_given_to_use_is_connected_anew_in_a_forked_child(combo: SchedulerClusterCombo) -> None:
    """What joblib's own test_nested_loop[multiprocessing-scaler] does: the adapters connect the child anew,
    with the given client's settings, while the given Client object itself fails there."""
    with Client(address=combo.get_address(), name="given", timeout_seconds=30) as given:
        with use(given):
            assert scaler_sum(10) == 45
            assert in_forked_child(scaler_sum_and_client_name, 10) == ("returned", (45, "given", True))
            outcome = in_forked_child(submit_and_wait, given)
            assert outcome[:2] == ("raised", "ConnectionFailedError"), outcome
            assert scaler_sum(10) == 45  # the parent's client is still the parent's
            assert cluster_choice.current_client() is given


def test_a_backend_instance_forked_in_the_middle_of_a_call_works_in_the_child(by_environment: str) -> None:
    backend = ScalerBackend()
    with parallel_config(backend=backend):
        results = Parallel(n_jobs=2, return_as="generator", batch_size=1, pre_dispatch=2)(
            delayed(abs)(-i) for i in range(20)
        )
        assert next(results) == 0  # the call is under way: its callback thread runs as the child forks
        outcome = in_forked_child(scaler_sum_with, backend, 10)
        assert list(results) == list(range(1, 20))
    assert outcome == ("returned", 45)


def test_embedded_cluster_in_a_forked_child_that_exits_normally(python_env: dict[str, str]) -> None:
    """The child connects to its parent's embedded cluster, and its exit (atexit hooks and all) leaves it running."""
    script = textwrap.dedent(
        """
        import os, signal, sys, time
        from joblib import Parallel, delayed, parallel_config
        import scaler

        def total():
            with parallel_config(backend="scaler"):
                return sum(Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(10)))

        print("parent", total(), flush=True)
        pid = os.fork()
        if pid == 0:
            print("child", total(), flush=True)
            sys.exit(0)  # a normal exit: atexit hooks run in the child
        deadline = time.monotonic() + 60
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                print("child hung", flush=True)
                sys.exit(3)
            time.sleep(0.05)
        print("parent after the child", total(), flush=True)
        """
    )
    environment = dict(python_env, SCALER_ADDRESS="")
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=environment, check=False
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.split("\n")[:3] == ["parent 45", "child 45", "parent after the child 45"]


# ---------------------------------------------------------------------------------------------- the executor


def test_an_executor_made_in_the_parent_fails_at_once_in_a_forked_child(combo: SchedulerClusterCombo) -> None:
    with ScalerExecutor(address=combo.get_address()) as executor:
        assert executor.submit(abs, -1).result(timeout=30) == 1
        for call in (executor_submit, executor_map):
            outcome = in_forked_child(call, executor)
            assert outcome[:2] == ("raised", "BrokenScalerExecutor"), outcome
            assert "create a new ScalerExecutor in the child" in outcome[2]
        assert in_forked_child(executor_shutdown, executor)[0] == "returned"
        assert executor.submit(abs, -2).result(timeout=30) == 2  # the child's shutdown left the parent's alone
