"""dask.distributed's futures API through `scaler.compat.dask.distributed`, on a real LocalCluster.

The code under test imports only `scaler.compat.dask.distributed` where dask.distributed code imports
`dask.distributed`. The first tests follow the examples of dask's documentation page on futures
(docs.dask.org, "Futures"); the rest check, test by test, what the named tests of distributed's
`distributed/tests/test_client.py` check, on its public API only (see the report on issue 27 for the list and why).
Futures passed as arguments are kept results of the cluster (`scaler.Client.submit(..., keep=True)`): their
values never pass through the client, which the tests that pass large ones check.
"""

from __future__ import annotations

import concurrent.futures
import gc
import io
import os
import pathlib
import sys
import time
from operator import add
from typing import Iterator

import pytest

pytest.importorskip("dask")

from scaler.cluster.combo import free_local_address  # noqa: E402
from scaler.compat.cluster_choice import ADDRESS_ENVIRONMENT_VARIABLE  # noqa: E402
from scaler.compat.dask.distributed import (  # noqa: E402
    FIRST_COMPLETED,
    Client,
    Future,
    LocalCluster,
    as_completed,
    default_client,
    fire_and_forget,
    get_client,
    progress,
    rejoin,
    secede,
    wait,
    worker_client,  # noqa: E402
)
from tests.integration.client_poison import (  # noqa: E402
    MB,
    make_poison,
    objects_in_store,
    poison_this_process,
    size_of,
    store_fetches,
)
from tests.integration.waiting import wait_until  # noqa: E402

WAIT_SECONDS = 60  # every wait has one; none is reached when things work
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only")


def inc(x: int) -> int:
    return x + 1


def div(x: float, y: float) -> float:
    return x / y


def slow_inc(x: int, delay: float) -> int:
    time.sleep(delay)
    return x + 1


def fail_until(path: str, failures: int) -> int:
    """Fails the first `failures` calls (counted in the file at `path`), then returns the call's number."""
    calls = int(pathlib.Path(path).read_text() or 0) + 1
    pathlib.Path(path).write_text(str(calls))
    if calls <= failures:
        raise ZeroDivisionError(f"call {calls}")
    return calls


def write_text(path: str, text: str) -> None:
    pathlib.Path(path).write_text(text)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    address = free_local_address()
    with pytest.MonkeyPatch.context() as patch:
        # How a task finds its scheduler for get_client() on workers that do not say it themselves.
        patch.setenv(ADDRESS_ENVIRONMENT_VARIABLE, address)
        local = LocalCluster(n_workers=2, threads_per_worker=1, scheduler_port=int(address.rsplit(":", 1)[1]))
    with local:
        yield local


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster, timeout=30) as connected:
        yield connected


# ---------------------------------------------------------------------------------------------- the docs' examples


def test_docs_submit_map_gather_scatter(client: Client) -> None:
    a = client.submit(inc, 10)
    b = client.submit(inc, 20)
    assert isinstance(a, Future) and a.key.startswith("inc-")
    assert a.result(WAIT_SECONDS) == 11
    assert "finished" in repr(a) and a.key in repr(a)
    futures = client.map(inc, range(100))
    assert client.gather(futures) == list(range(1, 101))
    assert client.gather([a, b]) == [11, 21]
    remote = client.scatter([1, 2, 3])
    assert [future.status for future in remote] == ["finished"] * 3
    assert client.gather(remote) == [1, 2, 3]
    assert client.submit(sum, remote).result(WAIT_SECONDS) == 6  # scattered data read on the cluster


def test_docs_errors_raise_remote_exception(client: Client) -> None:
    a = client.submit(div, 1, 0)
    with pytest.raises(ZeroDivisionError):
        a.result(WAIT_SECONDS)
    assert a.status == "error"
    assert isinstance(a.exception(), ZeroDivisionError)
    assert a.traceback() is not None


def test_docs_futures_as_inputs(client: Client) -> None:
    a = client.submit(inc, 10)
    b = client.submit(inc, 20)
    c = client.submit(add, a, b)
    assert c.result(WAIT_SECONDS) == 32
    failed = client.submit(div, 1, 0)
    dependent = client.submit(inc, failed)
    with pytest.raises(ZeroDivisionError):
        dependent.result(WAIT_SECONDS)


def test_docs_wait_and_as_completed(client: Client) -> None:
    futures = client.map(inc, range(10))
    done, not_done = wait(futures, timeout=WAIT_SECONDS)
    assert done == set(futures) and not not_done
    assert sorted(future.result() for future in as_completed(futures)) == list(range(1, 11))
    assert sorted(result for _, result in as_completed(futures, with_results=True)) == list(range(1, 11))
    batches = list(as_completed(client.map(inc, range(5)), with_results=True).batches())
    assert sorted(result for batch in batches for _, result in batch) == [1, 2, 3, 4, 5]
    sequence = as_completed(client.map(inc, [0]))
    seen = []
    for future in sequence:  # adding during iteration, as an iterative algorithm does
        seen.append(future.result())
        if len(seen) < 3:
            sequence.add(client.submit(inc, seen[-1]))
    assert seen == [1, 2, 3]


def test_docs_fire_and_forget(client: Client, tmp_path: pathlib.Path) -> None:
    target = tmp_path / "out.txt"

    def start() -> None:
        fire_and_forget(client.submit(write_text, str(target), "written", pure=False))

    start()  # here we lose the only Future of that task
    deadline = time.monotonic() + WAIT_SECONDS
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert target.read_text() == "written"


def submit_from_task(n: int) -> int:
    """The docs' "Submit Tasks from Tasks": a task gets a client of its own scheduler and waits on its tasks."""
    client = get_client()
    futures = client.map(inc, range(n))
    secede()
    results = client.gather(futures)
    rejoin()
    with worker_client() as same:
        assert same is client
    return sum(results)


def test_docs_submit_tasks_from_tasks(client: Client) -> None:
    # More tasks waiting on nested ones than there are workers: no deadlock, with or without secede.
    assert client.gather(client.map(submit_from_task, [3, 4, 5])) == [6, 10, 15]


# ---------------------------------------------------------------------------------------------- test_client.py's
# distributed's own tests are not in its wheel or sdist, and this project's code is its own: each test below
# checks, through the public API only, what these tests of distributed/tests/test_client.py check:
# test_submit_naming, test_map_naming, test_map_keynames, test_map (zipped iterables, keywords),
# test_map_empty, test_map_retries, test_thread, test_sync_exceptions, test_Future_exception_sync,
# test_gather_sync, test_gather (nested), test_Future_release_sync. Left aside: those reading the scheduler's
# or workers' internals (s.tasks, who_has, c.futures) or dask's worker placement (workers=, rebalance).


def test_submit_naming(client: Client) -> None:
    first, second = client.submit(inc, 1), client.submit(inc, 1)
    assert first.key == second.key and first._state is second._state
    assert client.submit(inc, 1, pure=False).key != first.key
    assert client.submit(inc, 1, key="x").key == "x"


def test_submit_same_key_runs_once(client: Client, tmp_path: pathlib.Path) -> None:
    counter = str(tmp_path / "calls")
    pathlib.Path(counter).write_text("0")
    first = client.submit(fail_until, counter, 0, key="counted")
    assert first.result(WAIT_SECONDS) == 1
    again = client.submit(fail_until, counter, 0, key="counted")
    assert again.result(WAIT_SECONDS) == 1
    assert pathlib.Path(counter).read_text() == "1"


def test_map_naming_and_keynames(client: Client) -> None:
    assert [f.key for f in client.map(inc, range(5))] == [f.key for f in client.map(inc, range(5))]
    assert len({f._state for f in client.map(inc, [1, 1, 1, 1])}) == 1
    assert len({f._state for f in client.map(inc, [1, 1, 1, 1], pure=False)}) == 4
    named = client.map(inc, range(4), key="INC")
    assert all(f.key.startswith("INC") for f in named) and len({f.key for f in named}) == 4
    keys = ["inc-1", "inc-2", "inc-3", "inc-4"]
    assert [f.key for f in client.map(inc, range(4), key=keys)] == keys


def test_map_zips_iterables_and_keywords(client: Client) -> None:
    assert client.gather(client.map(add, range(3), range(4))) == [0, 2, 4]
    assert client.gather(client.map(lambda x, y=10: x + y, range(5), y=5)) == list(range(5, 10))
    assert client.gather(client.map(inc, [], pure=False)) == []


def test_map_retries(client: Client, tmp_path: pathlib.Path) -> None:
    paths = [str(tmp_path / name) for name in ("a", "b", "c")]
    for path in paths:
        pathlib.Path(path).write_text("0")
    x, y, z = client.map(fail_until, paths, [1, 0, 2], retries=2, pure=False)
    assert (x.result(WAIT_SECONDS), y.result(WAIT_SECONDS), z.result(WAIT_SECONDS)) == (2, 1, 3)
    pathlib.Path(paths[2]).write_text("0")
    only_once = client.submit(fail_until, paths[2], 2, retries=1, pure=False)
    with pytest.raises(ZeroDivisionError, match="call 2"):
        only_once.result(WAIT_SECONDS)


def test_thread(client: Client) -> None:
    future = client.submit(slow_inc, 1, 1.0)
    with pytest.raises(TimeoutError):
        future.result(timeout="10 ms")  # dask's timeouts may be strings
    assert future.result(WAIT_SECONDS) == 2


def test_sync_exceptions_and_Future_exception_sync(client: Client) -> None:
    assert client.submit(div, 10, 2).result(WAIT_SECONDS) == 5
    failing = client.submit(div, 10, 0)
    assert isinstance(failing.exception(WAIT_SECONDS), ZeroDivisionError)
    assert client.submit(div, 1, 1).exception(WAIT_SECONDS) is None
    assert client.submit(div, 10, 5).result(WAIT_SECONDS) == 2  # continues to operate


def test_gather_sync(client: Client) -> None:
    x = client.submit(inc, 1)
    assert client.gather(x) == 2
    y = client.submit(div, 1, 0)
    with pytest.raises(ZeroDivisionError):
        client.gather([x, y])
    assert client.gather([x, y], errors="skip") == [2]
    assert client.gather({"x": x, "y": [x, (x,)]}) == {"x": 2, "y": [2, (2,)]}


def test_scatter_dict_and_hash(client: Client) -> None:
    scattered = client.scatter({"y": 20})
    assert isinstance(scattered["y"], Future) and scattered["y"].key == "y"
    assert client.submit(inc, scattered["y"]).result(WAIT_SECONDS) == 21
    one, two = client.scatter(123), client.scatter(123)
    assert one.key == two.key
    assert client.scatter(123, hash=False).key != one.key
    assert one.result() == 123


def test_scattered_futures_nested_in_arguments(client: Client) -> None:
    [x, y] = client.scatter([1, 2])
    assert client.submit(sum, [x, y, 3]).result(WAIT_SECONDS) == 6
    assert client.submit(lambda d: d["a"] + d["b"][0], {"a": x, "b": (y,)}).result(WAIT_SECONDS) == 3
    # "tags" is a keyword of the native submit, not of dask's: it reaches the function
    assert client.submit(lambda a, *, tags: a + tags, x, tags=y).result(WAIT_SECONDS) == 3


def test_computed_futures_nested_in_arguments(client: Client) -> None:
    futures = client.map(inc, range(3))
    assert client.submit(sum, futures).result(WAIT_SECONDS) == 6
    assert client.submit(lambda d: d["x"][1], {"x": futures}).result(WAIT_SECONDS) == 2
    assert client.gather(client.map(add, futures, futures)) == [2, 4, 6]


@linux_only
def test_computed_futures_as_arguments_never_pass_through_the_client(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    poison_this_process(monkeypatch)  # a value that reached this process would raise here
    fetches = store_fetches(client.native, monkeypatch)
    a = client.submit(make_poison, MB, 1)
    b = client.submit(make_poison, MB, 2)
    assert client.submit(size_of, a, b).result(WAIT_SECONDS) == 2 * MB
    assert client.submit(lambda values: size_of(*values), [a, b]).result(WAIT_SECONDS) == 2 * MB
    assert client.submit(lambda d: size_of(d["a"], *d["rest"]), {"a": a, "rest": (b,)}).result(WAIT_SECONDS) == 2 * MB
    assert client.gather(client.map(size_of, [a, b], [b, a])) == [2 * MB, 2 * MB]
    assert fetches == []
    with pytest.raises(AssertionError, match="unpickled in the client"):
        a.result(WAIT_SECONDS)  # the poison holds: what the lines above would have caught


@linux_only
def test_released_and_collected_futures_leave_the_store(client: Client) -> None:
    native = client.native
    wait_until(lambda: bool(native._connection.stores.home), "the client is told of its store", WAIT_SECONDS)
    gc.collect()
    before = objects_in_store(native)
    futures = client.map(make_poison, [MB] * 3, [1, 2, 3])
    twin = client.submit(make_poison, MB, 3)  # the same pure call: the key of futures[2], one result
    wait(futures, timeout=WAIT_SECONDS)
    wait_until(lambda: objects_in_store(native) >= before + 3, "the results are kept in the store", WAIT_SECONDS)
    futures[0].release()
    del futures[1]
    gc.collect()  # a collected Future lets go of its key too
    futures[-1].release()  # the twin still holds the key (its key is that of the last one)
    wait_until(lambda: objects_in_store(native) <= before + 1, "released results leave the store", WAIT_SECONDS)
    assert twin.status == "finished" and client.submit(size_of, twin).result(WAIT_SECONDS) == MB
    twin.release()
    wait_until(lambda: objects_in_store(native) <= before, "the last result leaves the store", WAIT_SECONDS)


def test_add_done_callback_gets_the_future(client: Client) -> None:
    called: concurrent.futures.Future = concurrent.futures.Future()
    future = client.submit(inc, 41)
    future.add_done_callback(called.set_result)
    assert called.result(WAIT_SECONDS) is future and future.result() == 42


def test_cancel(client: Client) -> None:
    blocker = [client.submit(slow_inc, i, 1.0, pure=False) for i in range(2)]  # both workers busy
    queued = client.submit(inc, 100, pure=False)
    queued.cancel()
    wait([queued], timeout=WAIT_SECONDS)
    assert queued.status == "cancelled" and queued.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        queued.result()
    client.cancel(blocker, force=True)
    wait(blocker, timeout=WAIT_SECONDS)


def test_resources_are_worker_tags(client: Client) -> None:
    assert client.submit(inc, 7, resources={"GPU": 0}).result(WAIT_SECONDS) == 8
    needs_gpu = client.submit(inc, 8, resources={"GPU": 1})  # no worker of this cluster has the tag
    with pytest.raises(TimeoutError):
        needs_gpu.result(timeout=0.5)
    assert needs_gpu.status == "pending"
    needs_gpu.cancel()
    with pytest.raises(ValueError):
        client.submit(inc, 9, resources={"GPU": -1})


def test_wait_first_completed_and_timeout(client: Client) -> None:
    slow = client.submit(slow_inc, 0, 3.0, pure=False)
    fast = client.submit(inc, 0, pure=False)
    done, not_done = wait([slow, fast], timeout=WAIT_SECONDS, return_when=FIRST_COMPLETED)
    assert fast in done
    slower = client.submit(slow_inc, 1, 3.0, pure=False)
    with pytest.raises(TimeoutError):
        wait(slower, timeout=0.01)
    client.cancel([slow, slower], force=True)  # the next tests have both workers
    wait([slow, slower], timeout=WAIT_SECONDS)


def test_as_completed_raise_errors(client: Client) -> None:
    futures = [client.submit(div, 1, 0), client.submit(div, 1, 1)]
    with pytest.raises(ZeroDivisionError):
        list(as_completed(futures, with_results=True))
    results = dict((f.key, r) for f, r in as_completed(futures, with_results=True, raise_errors=False))
    assert isinstance(results[futures[0].key], ZeroDivisionError) and results[futures[1].key] == 1


def test_progress_counts_futures(client: Client) -> None:
    shown = io.StringIO()
    futures = client.map(inc, range(5))
    progress(futures, file=shown)
    assert "5/5" in shown.getvalue()
    assert all(future.done() for future in futures)


def test_release_forgets_the_key(client: Client) -> None:
    future = client.submit(inc, 1000)
    future.result(WAIT_SECONDS)
    key = future.key
    assert Future(key, client).result() == 1001  # another Future of a key the client holds
    future.release()
    assert future.status == "lost"
    with pytest.raises(KeyError):
        Future(key, client)


def test_default_client_and_get_client(cluster: LocalCluster) -> None:
    with Client(cluster) as first:
        assert default_client() is first and get_client() is first
        with Client(cluster) as second:
            assert default_client() is second
        assert default_client() is first
        with Client(cluster.scheduler_address.removeprefix("tcp://"), set_as_default=False) as aside:
            assert default_client() is first
            assert aside.submit(inc, 1).result(WAIT_SECONDS) == 2
    with pytest.raises(ValueError):
        default_client()


def test_client_without_address_owns_its_cluster() -> None:
    with Client(n_workers=1, threads_per_worker=1, memory_limit="2GB") as client:
        cluster = client.cluster
        assert isinstance(cluster, LocalCluster) and cluster.processes == 1
        assert client.submit(os.getpid).result(WAIT_SECONDS) != os.getpid()
        assert client.dashboard_link == ""
    assert client.status == "closed" and cluster.status == "closed"


def test_restart_cancels_and_forgets(client: Client) -> None:
    running = client.submit(slow_inc, 0, 1.0, pure=False)
    kept = client.submit(inc, 5)
    kept.result(WAIT_SECONDS)
    client.restart()
    wait([running], timeout=WAIT_SECONDS)
    assert running.status == "cancelled"
    with pytest.raises(KeyError):
        Future(kept.key, client)
    assert client.submit(inc, 5).result(WAIT_SECONDS) == 6  # usable again, the same call runs anew


def use_client(client: Client) -> int:
    return client.submit(inc, 1).result(WAIT_SECONDS)


def test_client_passed_into_a_task(client: Client) -> None:
    assert client.submit(use_client, client).result(WAIT_SECONDS) == 2


def test_run_and_upload_file_say_why_not(client: Client) -> None:
    with pytest.raises(NotImplementedError, match="address each worker"):
        client.run(os.getpid)
    with pytest.raises(NotImplementedError, match="address each worker"):
        client.upload_file(__file__)
