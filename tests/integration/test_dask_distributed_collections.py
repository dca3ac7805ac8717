"""While a `scaler.compat.dask.distributed.Client` is open, dask's own compute and persist run on its cluster.

As with dask.distributed: `x.compute()`, `dask.compute(...)` and `dask.persist(...)` need no `scheduler=`;
closing the client gives dask back its previous scheduler, and `set_as_default=False` leaves dask alone.
Persisted chunks are results kept on the cluster (`scaler.Client.persist_graph`): the tests show they never
reach the client (a value this process cannot unpickle; a spy on its store reads) and leave with their collection.
"""

from __future__ import annotations

import gc
import io
import os
import sys
from typing import Any, Iterator

import pytest

dask = pytest.importorskip("dask")
np = pytest.importorskip("numpy")

import dask.array as da  # noqa: E402

from scaler.compat.dask.distributed import Client, Future, LocalCluster, futures_of, progress, wait  # noqa: E402
from tests.integration.client_poison import (  # noqa: E402
    MB,
    make_poison,
    objects_in_store,
    poison_this_process,
    results_delivered,
    size_of,
    store_fetches,
)
from tests.integration.waiting import wait_until  # noqa: E402

WAIT_SECONDS = 60
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(n_workers=2, threads_per_worker=1) as local:
        yield local


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster, timeout=30) as connected:
        yield connected


@dask.delayed
def process_id() -> int:
    return os.getpid()


def test_compute_runs_on_the_active_client_without_scheduler(cluster: LocalCluster) -> None:
    before = dask.config.get("scheduler", None)
    x = da.arange(100, chunks=10)
    with Client(cluster):
        assert process_id().compute() != os.getpid()  # on a worker of the cluster
        assert dask.compute(process_id(), x.sum())[0] != os.getpid()
        assert x.sum().compute() == 4950
    assert dask.config.get("scheduler", None) == before  # dask's own scheduler again
    assert process_id().compute() == os.getpid()  # dask's threaded scheduler runs it in this process


def test_newest_open_client_is_the_scheduler(cluster: LocalCluster) -> None:
    with Client(cluster) as first:
        with Client(cluster) as second:
            assert dask.config.get("scheduler") == second.get
        assert dask.config.get("scheduler") == first.get
        with Client(cluster, set_as_default=False) as aside:
            assert dask.config.get("scheduler") == first.get
            assert dask.compute(process_id(), scheduler=aside.get)[0] != os.getpid()


def test_set_as_default_false_leaves_dask_alone(cluster: LocalCluster) -> None:
    with Client(cluster, set_as_default=False):
        assert process_id().compute() == os.getpid()


def test_client_get_and_compute(client: Client) -> None:
    assert client.get({"x": (sum, [1, 2]), "y": (max, "x", 1)}, "y") == 3
    assert client.get({"x": 1, "y": (abs, -2)}, ["x", ["y"]]) == (1, (2,))
    x = da.ones((20, 20), chunks=5)
    total = client.compute(x.sum())
    assert isinstance(total, Future) and total.result(WAIT_SECONDS) == 400
    a, b, plain = client.compute([x.sum(), x.mean(), 7])
    assert (a.result(WAIT_SECONDS), b.result(WAIT_SECONDS), plain) == (400, 1.0, 7)
    assert client.compute(x.max(), sync=True) == 1
    np.testing.assert_array_equal(client.compute(x + 1, sync=True), np.full((20, 20), 2.0))


def test_graph_reads_scattered_futures(client: Client) -> None:
    [future] = client.scatter([np.arange(5)])
    assert client.get({"x": future, "y": (np.sum, "x")}, "y") == 10


@linux_only
def test_persist_keeps_chunks_on_the_cluster(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    fetches = store_fetches(client.native, monkeypatch)
    x = da.arange(1_000_000, chunks=100_000) * 2  # 800 kB chunks: each stays in a store, none rides inline
    persisted = x.persist()
    futures = futures_of(persisted)
    assert len(futures) == 10 and all(isinstance(future, Future) for future in futures)
    wait(persisted, timeout=WAIT_SECONDS)
    shown = io.StringIO()
    progress(persisted, file=shown)
    assert "10/10" in shown.getvalue()
    total = x.sum().compute()
    assert (persisted.sum() + 1).compute() == total + 1
    (again,) = dask.persist(persisted + 1)
    assert len(futures_of(again)) == 10
    assert again.max().compute() == 1_999_999
    assert client.persist(x).sum().compute() == total
    assert fetches == []  # the chunks never came to the client
    np.testing.assert_array_equal(again[:5].compute(), np.arange(5) * 2 + 1)  # computing a chunk brings it here
    # Persisting again names the same keys: their first futures stand, as in dask
    assert {f._state for f in futures_of(client.persist(x))} == {f._state for f in futures_of(persisted)}


@linux_only
def test_small_persisted_chunks_stay_on_the_cluster(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    delivered = results_delivered(monkeypatch)
    fetches = store_fetches(client.native, monkeypatch)
    x = da.arange(10_000, chunks=1_000) * 2  # 8 kB chunks: a plain result this small rides in its result message
    persisted = x.persist()
    wait(persisted, timeout=WAIT_SECONDS)
    assert delivered == []  # no chunk came to the client
    assert persisted.sum().compute() == 2 * sum(range(10_000))  # read where they are
    assert fetches == []
    futures = {future.key: future for future in futures_of(persisted)}
    first = futures[persisted.__dask_keys__()[0]]
    np.testing.assert_array_equal(first.result(WAIT_SECONDS), np.arange(1_000) * 2)  # fetched when asked for
    assert len(fetches) == 1


@linux_only
def test_persisted_values_never_reach_the_client(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    poison_this_process(monkeypatch)  # a value that reached this process would raise here
    persisted = dask.persist(*[dask.delayed(make_poison)(MB, fill) for fill in (1, 2, 3)])
    wait(persisted, timeout=WAIT_SECONDS)
    assert dask.delayed(size_of)(*persisted).compute() == 3 * MB
    assert dask.compute(*[dask.delayed(size_of)(part) for part in persisted]) == (MB, MB, MB)
    with pytest.raises(AssertionError, match="unpickled in the client"):
        persisted[0].compute()  # the poison holds: what the lines above would have caught


@linux_only
def test_futures_inside_graphs_never_pass_through_the_client(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    poison_this_process(monkeypatch)  # a value that reached this process would raise here
    a = client.submit(make_poison, MB, 1)
    b = client.submit(make_poison, MB, 2)
    assert client.get({"y": (size_of, a, b)}, "y") == 2 * MB  # a task's arguments
    assert client.get({"v": [a, (b, 1)], "y": (lambda v: size_of(v[0], v[1][0]), "v")}, "y") == 2 * MB  # nested
    assert dask.compute(dask.delayed(size_of)(a, b))[0] == 2 * MB  # dask's compute on the active client
    both = dask.delayed(lambda d: size_of(d["a"], *d["rest"]))({"a": a, "rest": [b]})
    assert both.compute() == 2 * MB
    assert client.compute(both).result(WAIT_SECONDS) == 2 * MB
    (kept,) = dask.persist(dask.delayed(lambda v: v)(a))  # a persisted result made of a future, read later
    assert dask.delayed(size_of)(kept, b).compute() == 2 * MB
    with pytest.raises(AssertionError, match="unpickled in the client"):
        a.result(WAIT_SECONDS)  # the poison holds: what the lines above would have caught


def test_a_graph_of_a_future_alone_leaves_it_kept(client: Client) -> None:
    x = client.submit(list, (1, 2))  # not a scalar: kept in a store, read from there by result()
    assert client.compute(dask.delayed(x)).result(WAIT_SECONDS) == [1, 2]  # the graph's key is the future's
    assert x.result(WAIT_SECONDS) == [1, 2]  # still kept: computing it again did not release it


@linux_only
def test_persisted_collection_as_a_task_argument(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    x = da.arange(10, chunks=5).persist()

    def total(array: Any) -> int:
        assert isinstance(array, da.Array)
        return int(array.sum().compute())

    assert client.submit(total, x).result(WAIT_SECONDS) == 45
    assert client.submit(total, x + 1).result(WAIT_SECONDS) == 55  # a graph on top of the persisted chunks
    assert client.submit(lambda arrays: total(arrays[0]), [x]).result(WAIT_SECONDS) == 45
    poison_this_process(monkeypatch)
    parts = dask.persist(*[dask.delayed(make_poison)(MB, fill) for fill in (1, 2)])
    assert client.submit(lambda values: sum(size_of(part.compute()) for part in values), parts).result() == 2 * MB


def make_partition(index: int, rows: int) -> Any:
    import pandas as pd

    return pd.DataFrame({"key": (np.arange(rows) + index) % 7, "value": np.arange(rows) + index * rows})


@linux_only
def test_persist_dataframe_then_query(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    native = client.native
    gc.collect()
    before = objects_in_store(native)
    fetches = store_fetches(native, monkeypatch)
    rows = 100_000  # 1.6 MB partitions, made on the workers
    persisted = dd.from_map(make_partition, range(4), rows=rows).persist()
    assert len(futures_of(persisted)) == 4
    wait(persisted, timeout=WAIT_SECONDS)
    frame = pd.concat([make_partition(index, rows) for index in range(4)], ignore_index=True)
    expected = frame.groupby("key").value.sum()
    for _ in range(3):
        pd.testing.assert_series_equal(persisted.groupby("key").value.sum().compute(), expected)
    assert len(persisted) == 4 * rows
    assert fetches == []
    assert objects_in_store(native) >= before + 4
    del persisted
    gc.collect()  # the collection's futures go with it, and their partitions leave the store
    wait_until(lambda: objects_in_store(native) <= before, "the partitions leave the store", WAIT_SECONDS)


def test_dataframe_shuffle_runs_on_the_cluster(client: Client) -> None:
    # A shuffle needs a method that works across processes: the client sets dask's to "tasks".
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    frame = pd.DataFrame({"key": np.arange(600) % 13, "value": np.arange(600)})
    other = pd.DataFrame({"key": np.arange(13), "weight": np.arange(13) * 10})
    merged = dd.from_pandas(frame, npartitions=4).merge(dd.from_pandas(other, npartitions=3), on="key")
    assert merged.weight.sum().compute() == frame.merge(other, on="key").weight.sum()  # a hash join: a shuffle
