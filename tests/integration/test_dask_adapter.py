"""scaler.get, the dask scheduler function, against a real scheduler and real workers.

Every collection result is compared with dask's own synchronous scheduler on the same expression.
"""

from __future__ import annotations

import collections
import operator
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import traceback
from typing import Any, Iterator

import pytest

dask = pytest.importorskip("dask")
np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")

import dask.array as da  # noqa: E402
import dask.bag as db  # noqa: E402
import dask.dataframe as dd  # noqa: E402
from dask._task_spec import Alias, DataNode, Dict, List, Task, TaskRef, Tuple  # noqa: E402
from dask.highlevelgraph import HighLevelGraph  # noqa: E402
from dask.utils_test import GetFunctionTestMixin, inc  # noqa: E402

import scaler  # noqa: E402
import scaler.compat.dask  # noqa: E402
from scaler import Client, SchedulerClusterCombo  # noqa: E402
from scaler.client.graph import GraphError  # noqa: E402
from scaler.compat import cluster_choice  # noqa: E402
from scaler.compat.dask import translation, use  # noqa: E402
from scaler.scheduler.config import default_monitor_address  # noqa: E402
from scaler.ui.feed import MonitorSubscriber  # noqa: E402
from tests.conftest import REPO_ROOT  # noqa: E402
from tests.integration.test_graph import wait_until_the_scheduler_holds_no_task  # noqa: E402

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def module_client(combo: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(address=combo.get_address(), timeout_seconds=30) as connected:
        yield connected


@pytest.fixture(autouse=True)
def on_the_test_cluster(module_client: Client) -> Iterator[Client]:
    """Every test of this module computes on the module's cluster unless it chooses otherwise."""
    with use(module_client):
        yield module_client


@pytest.fixture(autouse=True)
def shuffles_in_tmp_path(tmp_path: pathlib.Path) -> Iterator[None]:
    """dask's disk shuffles (merges, bag groupbys) keep their data in a partd directory that only an exit through
    atexit removes, in the processor that made it, which a worker stops without: this test owns them."""
    directory = tmp_path / "dask-temporary"
    directory.mkdir()
    with dask.config.set(temporary_directory=str(directory)):
        yield
    shutil.rmtree(directory, ignore_errors=True)


def same_as_sync(*collections: Any) -> tuple:
    """Compute on Scaler and with dask's sync scheduler; assert equal; return the Scaler results."""
    ours = dask.compute(*collections, scheduler=scaler.get)
    theirs = dask.compute(*collections, scheduler="sync")
    assert len(ours) == len(theirs)
    for mine, expected in zip(ours, theirs):
        if isinstance(expected, (pd.DataFrame, pd.Series)):
            _assert_frames_equal(mine, expected)
        elif isinstance(expected, np.ndarray):
            np.testing.assert_allclose(mine, expected)
        else:
            assert mine == expected
    return ours


def _assert_frames_equal(mine: Any, expected: Any) -> None:
    if isinstance(expected, pd.DataFrame):
        pd.testing.assert_frame_equal(mine.sort_index(), expected.sort_index())
    else:
        pd.testing.assert_series_equal(mine.sort_index(), expected.sort_index())


# ---------------------------------------------------------------------------------------------- dask's own suite


class TestDaskGetFunctionSuite(GetFunctionTestMixin):
    """dask.utils_test.GetFunctionTestMixin: what dask expects of any scheduler get function."""

    get = staticmethod(scaler.get)


# ---------------------------------------------------------------------------------------------- entry points


def test_scaler_get_is_the_dask_adapter() -> None:
    assert scaler.get is scaler.compat.dask.get
    assert "get" in scaler.__all__


def test_three_ways_to_choose_scaler_as_the_dask_scheduler() -> None:
    x = da.arange(100, chunks=10)
    assert dask.compute(x.sum(), scheduler=scaler.get) == (4950,)
    assert (x * 2).sum().compute(scheduler=scaler.get) == 9900
    with dask.config.set(scheduler=scaler.get):
        assert x.max().compute() == 99
        assert dask.compute(x.min(), x.mean()) == (0, 49.5)


def test_keys_may_nest_and_the_result_keeps_their_shape() -> None:
    graph = {"a": 1, "b": (inc, "a"), ("c", 0): (operator.add, "a", "b"), ("c", 1): (inc, ("c", 0))}
    for keys in ["b", ("c", 1), ["a", "b"], [["a"], [("c", 0), [("c", 1), "b"]]], [], [[]]]:
        assert scaler.get(graph, keys) == dask.threaded.get(graph, keys), keys


# ---------------------------------------------------------------------------------------------- collections


def test_dask_array_reductions_and_transposes() -> None:
    x = da.random.default_rng(0).random((400, 300), chunks=(100, 75))
    same_as_sync(
        x.sum(), x.mean(axis=0), x.std(axis=1), x.max(), (x + x.T[:300, :400].T).sum(axis=1),
        x.T.dot(x)[:5, :5], da.transpose(x, (1, 0))[::7, ::11], x.argmin(axis=0),
    )


def test_dask_bag_map_filter_foldby() -> None:
    bag = db.from_sequence(range(1000), npartitions=8)
    same_as_sync(
        bag.map(lambda value: value * 3).filter(lambda value: value % 2).sum(),
        bag.foldby(lambda value: value % 7, operator.add, 0),
        bag.map(str).frequencies(),
        bag.filter(lambda value: value > 990).map(lambda value: (value, -value)),
    )


def test_dask_delayed_pipelines() -> None:
    @dask.delayed
    def load(index: int) -> list[int]:
        return list(range(index * 10, index * 10 + 10))

    @dask.delayed
    def clean(values: list[int], drop: int = 0) -> list[int]:
        return [value for value in values if value % 5 != drop]

    @dask.delayed
    def summarize(parts: list[list[int]], scale: float) -> dict[str, float]:
        flat = [value for part in parts for value in part]
        return {"count": len(flat), "total": sum(flat) * scale}

    parts = [clean(load(index), drop=index % 3) for index in range(20)]
    summary = summarize(parts, scale=0.5)
    (result,) = same_as_sync(summary)
    assert result["count"] == 160
    assert same_as_sync(dask.delayed(sum)([dask.delayed(len)(part) for part in parts])) == (160,)


def test_dask_dataframe_groupby_aggregate_and_merges() -> None:
    generator = np.random.default_rng(1)
    left = pd.DataFrame({
        "key": generator.integers(0, 20, 2000), "value": generator.random(2000), "label": ["a", "b"] * 1000,
    })
    right = pd.DataFrame({"key": np.arange(20), "weight": np.arange(20) * 1.5})
    dleft, dright = dd.from_pandas(left, npartitions=6), dd.from_pandas(right, npartitions=2)
    merged = dleft.merge(dright, on="key", how="inner")
    same_as_sync(
        dleft.groupby("key").value.sum(),
        dleft.groupby(["key", "label"]).agg({"value": ["mean", "max", "count"]}),
        merged.assign(product=merged.value * merged.weight).groupby("label").product.sum(),
        dleft.merge(dright, left_on="key", right_on="key", how="left").weight.mean(),
    )


# ---------------------------------------------------------------------------------------------- task spec


def add_with_keywords(a: int, b: int, scale: int = 1) -> int:
    return (a + b) * scale


def test_task_spec_nodes_of_current_dask() -> None:
    graph = {
        "data": DataNode("data", 10),
        "looks_like_a_key": DataNode("looks_like_a_key", "data"),          # a literal string equal to a key
        "looks_like_a_task": DataNode("looks_like_a_task", (inc, 1)),      # a literal tuple with a callable
        "plain": Task("plain", inc, TaskRef("data")),
        "keywords": Task("keywords", add_with_keywords, TaskRef("plain"), 2, scale=TaskRef("data")),
        "containers": Task("containers", sum, List(TaskRef("plain"), Task(None, inc, TaskRef("data")), 3)),
        "mapping": Task("mapping", sorted, Dict({"x": TaskRef("plain"), "y": 1})),
        "tupled": Tuple(TaskRef("plain"), "data"),                          # "data" here is a literal string
        "alias": Alias("alias", "keywords"),
        "string_argument": Task("string_argument", str.upper, "data"),     # a literal, not the key "data"
    }
    keys = list(graph)
    assert scaler.get(graph, keys) == dask.get(graph, keys)
    assert scaler.get(graph, "string_argument") == "DATA"
    assert scaler.get(graph, "looks_like_a_task") == (inc, 1)


def test_high_level_graph_and_legacy_tuples() -> None:
    layers = {"a": {"x": 1, "y": (inc, "x")}, "b": {("z", 0): (operator.add, (inc, "x"), "y"), "w": [("z", 0), "y"]}}
    graph = HighLevelGraph(layers, {"a": set(), "b": {"a"}})
    assert scaler.get(graph, [("z", 0), "w"]) == ((4, [4, 2]))


def test_plain_tasks_are_sent_as_they_are_and_the_rest_through_the_node_runner() -> None:
    graph = {
        "x": DataNode("x", 1),
        "plain": Task("plain", inc, TaskRef("x")),
        "keywords": Task("keywords", add_with_keywords, TaskRef("x"), 1, scale=3),
    }
    result = translation.translate(graph, ["plain", "keywords"], fuse=False)
    assert result.graph["x"] == 1
    assert result.graph["plain"] == (inc, "x")
    assert result.graph["keywords"][0] is translation.run_nodes
    assert result.task_count == 2


def test_tiny_leaves_and_chains_are_fused_but_a_few_leaves_keep_their_parallelism() -> None:
    width = translation.LEAF_FUSION_MIN_LEAVES
    many = {("leaf", i): (inc, i) for i in range(width * 2)}
    many.update({("pair", i): (operator.add, ("leaf", 2 * i), ("leaf", 2 * i + 1)) for i in range(width)})
    many["total"] = (sum, [("pair", i) for i in range(width)])
    fused = translation.translate(many, ["total"])
    unfused = translation.translate(many, ["total"], fuse=False)
    assert unfused.task_count == 3 * width + 1
    assert fused.task_count == width + 1  # each pair computes its two leaves itself
    assert scaler.get(many, "total") == scaler.get(many, "total", fuse=False) == dask.get(many, "total")

    few = {("load", i): (inc, i) for i in range(4)}
    few["sum"] = (sum, [("load", i) for i in range(4)])
    assert translation.translate(few, ["sum"]).task_count == 5  # four loads stay four parallel tasks

    pair = fused.graph[("pair", 0)]
    assert pair == (operator.add, (inc, 0), (inc, 1))  # plain leaves are written in place as nested tasks

    chain = {"c0": (inc, 0), **{f"c{i}": (inc, f"c{i - 1}") for i in range(1, 100)}}
    assert translation.translate(chain, ["c99"]).task_count == 1
    assert translation.translate(chain, ["c99"]).graph["c99"][0] is translation.run_nodes  # too deep to nest
    assert translation.translate(chain, ["c5"]).graph["c5"] == (inc, (inc, (inc, (inc, (inc, (inc, 0))))))
    assert translation.translate(chain, ["c99", "c50"]).task_count == 2  # a requested link stays its own task
    assert scaler.get(chain, ["c99", "c50"]) == (100, 51)

    twice = {"x": (inc, 1), "double": (operator.add, "x", "x")}
    assert translation.translate(twice, ["double"]).graph["double"][0] is translation.run_nodes  # not computed twice
    assert scaler.get(twice, "double") == 4


Point = collections.namedtuple("Point", "x y")


def test_legacy_tasks_keep_dask_meaning() -> None:
    """Legacy tuples are sent as they are only when that cannot change their meaning."""
    graph = {
        "a": 1,
        "b": (inc, "a"),
        b"raw": 5,
        "bytes_literal": (operator.add, b"raw", b"!"),             # dask reads only str/int/float/tuple keys
        "point": (operator.attrgetter("y"), Point(0, "b")),         # keys inside a namedtuple are references
        "keys_in_a_set": (sorted, {"a", "b"}),
        "nested_task": (operator.add, (inc, "a"), "b"),
        "plain": (operator.add, "b", 10),
    }
    result = translation.translate(graph, list(graph), fuse=False)
    assert result.graph["plain"] == (operator.add, "b", 10)
    assert result.graph["b"] == (inc, "a")
    assert all(result.graph[key][0] is translation.run_nodes for key in ("bytes_literal", "point", "keys_in_a_set"))
    assert scaler.get(graph, list(graph)) == dask.get(graph, list(graph))


def test_fused_chains_with_array_and_frame_arguments() -> None:
    """A chain link fused into a task that also takes a numpy array or a pandas object, whose `==` is
    element-wise or raises (dask's test_map.py::test_series_map2 and test_categorical.py)."""
    for literal in (np.arange(3), pd.Series([10, 20, 30])):
        graph = {"a": (inc, 1), "b": (operator.add, "a", literal)}
        np.testing.assert_array_equal(scaler.get(graph, "b"), dask.get(graph, "b"))

    frame = pd.DataFrame({"a": range(9)}, index=pd.Index([0, 1, 3, 5, 6, 8, 9, 9, 9], name="position"))
    lookup = pd.Series({value: value + 1 for value in range(9)})
    same_as_sync(dd.from_pandas(frame, npartitions=3).a.map(lookup, meta=("a", "int64")))


# ---------------------------------------------------------------------------------------------- errors


class BrokenStage(RuntimeError):
    pass


def break_on(value: int, bad: int) -> int:
    if value == bad:
        raise BrokenStage(f"stage broke on {value}")
    return value


def test_a_failing_task_raises_its_exception_with_the_remote_traceback(combo: SchedulerClusterCombo) -> None:
    values = [dask.delayed(break_on)(index, 3) for index in range(6)]
    total = dask.delayed(sum)(values)
    with pytest.raises(BrokenStage, match="stage broke on 3") as raised:
        total.compute(scheduler=scaler.get)
    assert "break_on" in "".join(traceback.format_exception(raised.value))
    with MonitorSubscriber(default_monitor_address(combo.get_address())) as monitor:
        wait_until_the_scheduler_holds_no_task(monitor)
    # an independent computation on the same cluster is unaffected
    assert dask.delayed(sum)(values[:3]).compute(scheduler=scaler.get) == 3


def test_bad_keys_missing_dependencies_and_cycles_fail_before_anything_runs() -> None:
    with pytest.raises(KeyError):
        scaler.get({"a": 1}, ["a", "nope"])
    for fuse in (True, False):
        with pytest.raises(ValueError, match="cycle"):
            scaler.get({"a": (inc, "b"), "b": (inc, "a")}, "a", fuse=fuse)
        with pytest.raises(ValueError, match="cycle"):
            scaler.get({"a": (inc, "b"), "b": (inc, "c"), "c": (inc, "a"), "d": (inc, "b")}, ["d"], fuse=fuse)
    with pytest.raises(GraphError, match="not in the graph"):
        scaler.get({"a": Task("a", inc, TaskRef("elsewhere"))}, "a")


# ---------------------------------------------------------------------------------------------- which cluster


def test_use_chooses_the_cluster_innermost_first(module_client: Client) -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as other:
        with use(other.get_address()) as other_client:
            assert cluster_choice.current_client() is other_client
            assert dask.delayed(inc)(1).compute(scheduler=scaler.get) == 2
        assert cluster_choice.current_client() is module_client


def ancestor_pids(_: object = None) -> list[int]:
    import psutil

    return [parent.pid for parent in psutil.Process().parents()]


def test_use_as_a_plain_call_stays_until_reset(monkeypatch: pytest.MonkeyPatch, module_client: Client) -> None:
    monkeypatch.setattr(cluster_choice, "_used", [])  # only the choices this test makes
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as other:
        with Client(address=other.get_address(), timeout_seconds=30) as other_client:
            use(other_client)  # no with block
            assert cluster_choice.current_client() is other_client
            pids = dask.compute(dask.delayed(ancestor_pids)(1), scheduler=scaler.get)[0]
            assert other.cluster_pid in pids, "the computation did not run on the cluster chosen with use()"
            use(module_client)  # the latest choice wins
            assert cluster_choice.current_client() is module_client
            use.reset()
            assert cluster_choice._used == []
    monkeypatch.setenv("SCALER_ADDRESS", "tcp://127.0.0.1:1")  # after reset the environment decides again
    monkeypatch.setattr(cluster_choice, "_client_for", lambda address: address)
    assert cluster_choice.current_client() == "tcp://127.0.0.1:1"


def test_scaler_address_environment_variable(
    monkeypatch: pytest.MonkeyPatch, combo: SchedulerClusterCombo, module_client: Client
) -> None:
    monkeypatch.setattr(cluster_choice, "_used", [])  # no use(...) in force for this test
    monkeypatch.setenv("SCALER_ADDRESS", combo.get_address())
    try:
        assert dask.delayed(inc)(41).compute(scheduler=scaler.get) == 42
        chosen = cluster_choice.current_client()
        assert chosen is not module_client and chosen.address == combo.get_address()
    finally:
        chosen = cluster_choice._by_address.pop(combo.get_address(), None)
        if chosen is not None:
            chosen.disconnect()


@pytest.mark.timeout(120)
def test_embedded_cluster_started_on_first_use_and_stopped_at_exit(python_env: dict[str, str]) -> None:
    script = textwrap.dedent("""
        import os, time, dask, scaler, psutil
        from dask.utils_test import inc
        from scaler.compat import cluster_choice
        from scaler.scheduler.config import default_monitor_address
        from scaler.ui.feed import MonitorSubscriber
        print("result", dask.delayed(inc)(1).compute(scheduler=scaler.get))
        workers, deadline = -1, time.monotonic() + 60
        with MonitorSubscriber(default_monitor_address(cluster_choice._embedded.get_address())) as monitor:
            while workers != os.cpu_count() and time.monotonic() < deadline:
                snapshot = monitor.receive(timeout_seconds=1.0)
                if snapshot is not None:
                    workers = len(snapshot.workers)
        print("workers", workers, os.cpu_count())
        print("children", " ".join(str(p.pid) for p in psutil.Process().children(recursive=True)))
    """)
    environment = {name: value for name, value in python_env.items() if name != "SCALER_ADDRESS"}
    completed = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=100, cwd=REPO_ROOT
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in completed.stdout.splitlines() if " " in line)
    assert lines["result"] == "2"
    workers, cores = lines["workers"].split()
    assert workers == cores, f"the embedded cluster has {workers} workers on {cores} cores"
    import psutil

    survivors = []
    for pid in map(int, lines["children"].split()):
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                survivors.append(pid)
        except psutil.NoSuchProcess:
            pass
    assert not survivors, "the embedded cluster outlived the interpreter"


# examples/dask_array.py runs, and its three checks are asserted, in test_examples.py (check_dask_array).


def test_module_imports_without_dask_loaded() -> None:
    """`import scaler` and `import scaler.compat.dask` do not import dask; calling get does."""
    script = "import sys, scaler, scaler.compat.dask; print('dask' in sys.modules)"
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=REPO_ROOT),
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "False"
