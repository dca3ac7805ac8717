"""Results kept on the cluster (`submit(..., keep=True)`, `persist_graph`) and kept futures as arguments, with a
real scheduler, real workers and their store.

The large values here are `ClientPoison`s: unpickling one in the test (client) process raises, so a value that
reached the client at all would fail the test; the client's store fetches are counted as well.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from typing import Iterator

import pytest

import scaler
from scaler import Client, SchedulerClusterCombo
from scaler.compat.cluster_choice import use
from tests.integration import waiting
from tests.integration.client_poison import (
    MB,
    POISONED_PID_VARIABLE,
    ClientPoison,
    make_poison,
    objects_in_store,
    results_delivered,
    size_of,
    store_fetches,
)

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure
wait_until = functools.partial(waiting.wait_until, timeout=WAIT_SECONDS)


def first_byte(value: ClientPoison) -> int:
    return value.data[0]


def fail(message: str) -> int:
    raise ValueError(message)


def identity(value: object) -> object:
    return value


@pytest.fixture(scope="module")
def combo() -> Iterator[SchedulerClusterCombo]:
    os.environ[POISONED_PID_VARIABLE] = str(os.getpid())
    try:
        with SchedulerClusterCombo(n_workers=2, logging_level="WARNING") as started:
            yield started
    finally:
        del os.environ[POISONED_PID_VARIABLE]


@pytest.fixture
def client(combo: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(address=combo.get_address()) as connected:
        wait_until(lambda: bool(connected._connection.stores.home), "the client is told of its store")
        yield connected


@pytest.fixture
def fetches(client: Client, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The object ids this client reads from stores (a spy on the real Stores.fetch, which still runs)."""
    return store_fetches(client, monkeypatch)


def test_persisted_small_results_stay_in_stores_and_kept_submits_ride_inline(
    client: Client, fetches: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    delivered = results_delivered(monkeypatch)
    persisted = client.persist_graph({"a": (make_poison, 1000), "b": (size_of, "a")}, ["a", "b"])
    assert client.submit(size_of, persisted["a"]).result(WAIT_SECONDS) == 1000  # read on the cluster
    assert persisted["b"].result(WAIT_SECONDS) == 1000  # a scalar: inline, as ever
    assert len(delivered) == 2 and max(delivered) < 100 and fetches == []  # two scalars; the 1 kB value never came
    small = client.submit(bytes, 1000, keep=True)  # kept, not persisted: the inline fast path
    assert small.result(WAIT_SECONDS) == bytes(1000) and max(delivered) > 1000 and fetches == []


def test_a_large_kept_result_is_used_by_later_tasks_on_the_cluster_only(client: Client, fetches: list) -> None:
    kept = client.submit(make_poison, 20 * MB, keep=True)
    assert client.submit(size_of, kept).result(WAIT_SECONDS) == 20 * MB  # maybe while it still ran
    assert kept.done() and kept.exception() is None
    assert client.submit(size_of, kept, kept).result(WAIT_SECONDS) == 40 * MB
    assert client.map(size_of, [(kept,), (kept,)]) == [20 * MB, 20 * MB]
    assert client.submit(first_byte, value=kept).result(WAIT_SECONDS) == 1  # by keyword too
    assert fetches == []  # the bytes never came to the client


def test_a_kept_result_can_be_read_many_times(client: Client) -> None:
    large = client.submit(bytes, 2 * MB, keep=True)
    small = client.submit(identity, 42, keep=True)
    for _ in range(3):
        assert large.result(WAIT_SECONDS) == bytes(2 * MB)
        assert small.result(WAIT_SECONDS) == 42
    assert client.submit(len, large).result(WAIT_SECONDS) == 2 * MB
    assert client.submit(identity, small).result(WAIT_SECONDS) == 42


def test_releasing_a_kept_result_deletes_it_from_its_store(client: Client) -> None:
    before = objects_in_store(client)
    kept = client.map(make_poison, [(MB, fill) for fill in range(3)], keep=True)
    wait_until(lambda: all(future.done() for future in kept), "the kept tasks finish")
    wait_until(lambda: objects_in_store(client) >= before + 3, "the kept results are in the store")
    kept[0].release()
    del kept[1]
    gc.collect()  # a collected kept future releases its result too
    wait_until(lambda: objects_in_store(client) <= before + 1, "the released results leave the store")
    assert client.submit(first_byte, kept[-1]).result(WAIT_SECONDS) == 2
    with pytest.raises(ValueError, match="released"):
        client.submit(first_byte, kept[0])


def test_a_future_not_kept_is_refused_as_an_argument(client: Client) -> None:
    plain = client.submit(identity, 1)
    with pytest.raises(ValueError, match="keep=True"):
        client.submit(identity, plain)
    with pytest.raises(ValueError, match="keep=True"):
        client.map(identity, [(plain,)])


def test_a_task_on_a_failed_kept_task_fails_with_its_error(client: Client) -> None:
    failing = client.submit(fail, "broken input", keep=True)
    running_dependent = client.submit(identity, failing)  # likely sent while it ran: a graph edge
    with pytest.raises(ValueError, match="broken input"):
        running_dependent.result(WAIT_SECONDS)
    with pytest.raises(ValueError, match="broken input"):
        failing.result(WAIT_SECONDS)
    later_dependent = client.submit(identity, failing)  # after it failed: the scheduler kept the failure
    with pytest.raises(ValueError, match="broken input"):
        later_dependent.result(WAIT_SECONDS)


def test_a_persisted_graph_is_computed_on_where_it_is(client: Client, fetches: list) -> None:
    graph = {"a": (make_poison, 5 * MB, 1), "b": (make_poison, 5 * MB, 2), "tiny": 7}
    kept = client.persist_graph(graph, ["a", "b", "tiny"])
    assert all(future.keeps_result for future in kept.values())
    later = {"a": kept["a"], "b": kept["b"], "total": (size_of, "a", "b"), "firsts": (sum, [(first_byte, "a"),
                                                                                              (first_byte, "b")])}
    assert client.get(later, ["total", "firsts"]) == {"total": 10 * MB, "firsts": 3}
    with use(client):  # the dask scheduler function too
        assert scaler.get(later, "total") == 10 * MB
    assert client.get({"t": kept["tiny"], "double": (lambda x: 2 * x, "t")}, "double") == {"double": 14}
    assert fetches == []


def test_a_persisted_dask_collection_is_computed_on_where_its_chunks_are(client: Client, fetches: list) -> None:
    da = pytest.importorskip("dask.array")
    from dask.core import flatten
    from dask.highlevelgraph import HighLevelGraph

    from scaler.compat.dask.kept_refs import persisted_graph
    from scaler.compat.dask.persist import persist_dask_graph

    x = da.ones((4, 100_000), chunks=(1, 100_000))  # 800 kB chunks: each stays in a store
    futures = persist_dask_graph(client, x.__dask_graph__(), list(flatten(x.__dask_keys__())))
    graph = HighLevelGraph.from_collections(x.name, persisted_graph(futures), dependencies=[])
    persisted = da.Array(graph, x.name, x.chunks, x.dtype)
    with use(client):
        for _ in range(2):  # dask fuses the persisted chunks' references into no task: they stay references
            assert (persisted + 1).sum().compute(scheduler=scaler.get) == 800_000
        assert fetches == []
        assert persisted[:, :10].compute(scheduler=scaler.get).sum() == 40  # computing it brings it here


@pytest.mark.timeout(180)
def test_a_native_worker_takes_a_kept_result_as_an_argument(tmp_path: str) -> None:
    """Native workers see resolved object arguments only (PROTOCOL.md §6): kept results need nothing of them."""
    from scaler.native_tasks import NeutralSerializer, native
    from tests.integration.process_cluster import ProcessCluster
    from tests.native_worker import native_worker_executable

    cluster = ProcessCluster(native_worker_executable(), str(tmp_path))
    try:
        cluster.add_worker("native-1")
        with Client(address=cluster.address, serializer=NeutralSerializer(), timeout_seconds=30) as native_client:
            kept = native_client.submit(native("add"), 1, 2, keep=True)
            assert native_client.submit(native("mul"), kept, b=kept).result(WAIT_SECONDS) == 9
            assert kept.result(WAIT_SECONDS) == 3
    finally:
        cluster.stop()
