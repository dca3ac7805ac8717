"""dask's priority annotations as scaler.get reads them: from the expression dask hands a scheduler, from a
HighLevelGraph (values that are functions of the key included), and for tasks fused from several nodes."""

from __future__ import annotations

import pytest

dask = pytest.importorskip("dask")

from dask.highlevelgraph import HighLevelGraph  # noqa: E402

from scaler.compat.dask.annotations import annotated_priorities, fused_priorities  # noqa: E402
from scaler.compat.dask.translation import translate  # noqa: E402


def inc(x: int) -> int:
    return x + 1


def test_the_priority_annotation_of_each_key():
    with dask.annotate(priority=5):
        first = dask.delayed(inc)(1)
    second = dask.delayed(inc)(first)
    seen = {}

    def scheduler(dsk, keys, **kwargs):  # what dask.compute hands scaler.get
        seen.update(annotated_priorities(dsk))
        return dask.get(dsk, keys)

    assert dask.compute(second, scheduler=scheduler) == (3,)
    assert seen == {first.key: 5}


def test_a_high_level_graph_with_a_priority_that_is_a_function_of_the_key():
    graph = HighLevelGraph.from_collections("a", {("a", 0): 1, ("a", 1): 2}, dependencies=())
    graph.layers["a"].annotations = {"priority": lambda key: key[1] * 10}
    assert annotated_priorities(graph) == {("a", 0): 0, ("a", 1): 10}


def test_a_plain_dict_has_no_annotations():
    assert annotated_priorities({"x": 1}) == {}


def test_an_annotation_that_is_not_an_int_is_a_type_error_naming_the_key():
    with dask.annotate(priority=2.5):  # dask takes any number; the wire an Int32
        value = dask.delayed(inc)(1)
    with pytest.raises(TypeError, match=f"key {value.key!r}"):
        annotated_priorities(value.__dask_graph__())


def test_a_fused_task_runs_at_the_highest_priority_of_its_members():
    graph = {"a": (inc, 1), "b": (inc, "a"), "c": (inc, "b")}  # a chain: fused into one task at "c"
    translation = translate(graph, ["c"])
    assert translation.fused == {"c": ["a", "b", "c"]}
    assert fused_priorities({"a": 9, "b": 2}, translation.fused) == {"a": 9, "b": 2, "c": 9}
    assert translate(graph, ["c"], fuse=False).fused == {}
