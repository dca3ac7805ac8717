"""plan_graph, the pure graph planner behind Client.get: semantics, errors, orders. No processes.

A plan is checked by running it here, in order, the way the scheduler and workers would (each call
after the calls whose results it takes), and comparing with a direct recursive evaluation of the graph.
"""

from __future__ import annotations

import gc
import graphlib
import operator
from collections.abc import Hashable
from typing import Any

import pytest
from fuzz_budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler.client.graph import (
    DuplicateKeyError,
    GraphError,
    GraphKeyError,
    GraphPlan,
    TemplateCall,
    is_task,
    plan_graph,
    topological_order,
)

pytestmark = pytest.mark.timeout(60)

try:
    from scaler.client.graph_order_graphblas import graphblas_available, graphblas_order

    HAVE_GRAPHBLAS = graphblas_available()
except ImportError:  # numpy missing
    HAVE_GRAPHBLAS = False

ORDERS = [
    None,
    "python",
    pytest.param("graphblas", marks=pytest.mark.skipif(not HAVE_GRAPHBLAS, reason="python-graphblas missing")),
]


def inc(i: int) -> int:
    return i + 1


def add(a: Any, b: Any) -> Any:
    return a + b


def minus(a: int, b: int) -> int:
    return a - b


def total(*values: Any) -> Any:
    return sum(_flat(values))


def _flat(values: Any) -> list:
    flat: list = []
    for value in values:
        if isinstance(value, (list, tuple)):
            flat.extend(_flat(value))
        else:
            flat.append(value)
    return flat


def run_locally(plan: GraphPlan) -> dict[Hashable, Any]:
    """Run the plan as the cluster would: calls in the planned order, each slot filled by an earlier result."""
    results: dict[Hashable, Any] = {}
    for call in plan.calls:
        arguments = list(call.arguments)
        for position, dependency in call.reference_slots.items():
            assert dependency in results, f"{call.key!r} runs before its dependency {dependency!r}"
            arguments[position] = results[dependency]
        results[call.key] = call.function(*arguments)
    outcome = dict(plan.literals)
    for key, target in plan.targets.items():
        outcome[key] = results[target]
    return outcome


def evaluate(graph: dict, key: Hashable) -> Any:
    """The meaning of a graph key, straight from the definition in scaler/client/graph.py."""
    def is_key(value: Any) -> bool:
        try:
            return value in graph
        except TypeError:
            return False

    def argument(value: Any) -> Any:
        if is_key(value):
            return evaluate(graph, value)
        if type(value) is list:
            return [argument(item) for item in value]
        if type(value) is tuple:
            if is_task(value):
                return value[0](*(argument(item) for item in value[1:]))
            return tuple(argument(item) for item in value)
        return value

    value = graph[key]
    if is_task(value):
        return value[0](*(argument(item) for item in value[1:]))
    if is_key(value):
        return evaluate(graph, value)
    return value


def assert_valid_order(plan: GraphPlan) -> None:
    position = {call.key: index for index, call in enumerate(plan.calls)}
    assert len(position) == len(plan.calls), "a task is planned twice"
    for index, call in enumerate(plan.calls):
        for dependency in call.reference_slots.values():
            assert position[dependency] < index, f"{call.key!r} is planned before {dependency!r}"


DOCUMENT_003_GRAPH = {
    "a": 2,
    "b": 2,
    "c": (inc, "a"),
    "d": (add, "a", "b"),
    "e": (minus, "d", "c"),
    "f": add,
}


@pytest.mark.parametrize("order", ORDERS)
def test_the_graph_of_document_003(order: Any) -> None:
    plan = plan_graph(DOCUMENT_003_GRAPH, ["a", "b", "c", "d", "e", "f"], order=order)
    assert_valid_order(plan)
    assert run_locally(plan) == {"a": 2, "b": 2, "c": 3, "d": 4, "e": 1, "f": add}
    assert plan.literals == {"a": 2, "b": 2, "f": add}  # values and callables come back as they are
    assert [call.key for call in plan.calls if call.key == "e"] == ["e"]


def test_only_what_the_requested_keys_need_is_planned() -> None:
    graph = dict(DOCUMENT_003_GRAPH, broken=(inc, "cycle"), cycle=(inc, "broken"))
    plan = plan_graph(graph, ["c"])
    assert [call.key for call in plan.calls] == ["c"]
    assert run_locally(plan) == {"c": 3}


def test_literal_arguments_are_passed_in_place() -> None:
    plan = plan_graph({"x": 1, "y": (add, "x", 10)}, ["y"])
    (call,) = plan.calls
    assert call.arguments == [1, 10] and call.reference_slots == {}
    assert run_locally(plan) == {"y": 11}


def test_unhashable_and_container_literals() -> None:
    graph = {
        "x": 1,
        "with_set": (lambda x, y: x + len(y), "x", {1, 2}),
        "with_dict": (lambda d: sorted(d), {"x": 1}),
        "with_list": (sum, [1, 2, 3]),
    }
    plan = plan_graph(graph, ["with_set", "with_dict", "with_list"])
    assert run_locally(plan) == {"with_set": 3, "with_dict": ["x"], "with_list": 6}


def test_keys_and_tasks_inside_containers_and_nested_tasks() -> None:
    graph = {
        "x": 1,
        "y": (inc, "x"),
        "z": (add, (inc, "x"), "y"),                      # nested task
        "s": (total, ["x", "y", ("x", "z")]),             # keys inside a list and a tuple
        "n": (total, [(inc, "y"), [(add, "z", 100)]]),    # tasks inside lists
    }
    plan = plan_graph(graph, ["z", "s", "n"])
    assert_valid_order(plan)
    assert run_locally(plan) == {"z": 4, "s": 1 + 2 + 1 + 4, "n": 3 + 104}
    wrapped = {call.key for call in plan.calls if isinstance(call.function, TemplateCall)}
    assert wrapped == {"z", "s", "n"}


def test_repeated_dependency() -> None:
    plan = plan_graph({"x": (inc, 1), "double": (add, "x", "x")}, ["double"])
    assert run_locally(plan) == {"double": 4}


def test_tuple_keys_as_dask_makes_them() -> None:
    graph: dict = {("x", 0, 0): 1, ("x", 0, 1): (inc, ("x", 0, 0))}
    graph[("sum", 0)] = (add, ("x", 0, 0), ("x", 0, 1))
    graph["all"] = (total, [("x", 0, 1), ("sum", 0)])
    plan = plan_graph(graph, [("sum", 0), "all", ("x", 0, 0)])
    assert run_locally(plan) == {("sum", 0): 3, "all": 5, ("x", 0, 0): 1}


def test_aliases_are_followed() -> None:
    graph = {"x": (inc, 1), "alias": "x", "alias_of_alias": "alias", "literal": [1, 2], "to_literal": "literal",
             "user": (add, "alias_of_alias", 1)}
    plan = plan_graph(graph, ["alias_of_alias", "to_literal", "user"])
    assert run_locally(plan) == {"alias_of_alias": 2, "to_literal": [1, 2], "user": 3}
    assert plan.targets["alias_of_alias"] == "x"
    assert [call.key for call in plan.calls].count("x") == 1


def test_an_argument_is_a_key_only_if_the_graph_has_it_else_a_literal_even_a_string() -> None:
    # README, Graphs: `arg in graph` decides, whatever the type; anything else is passed as it is.
    plan = plan_graph({"x": (inc, "y")}, ["x"])
    (call,) = plan.calls
    assert call.arguments == ["y"] and call.reference_slots == {}
    assert plan_graph({"x": (str.upper, "y")}, ["x"]).calls[0].arguments == ["y"]
    with_key = plan_graph({"y": (inc, 1), "x": (inc, "y")}, ["x"])
    assert with_key.calls[-1].reference_slots == {0: "y"}
    # Keys need not be strings: an argument equal to a key is that key, a number or a tuple too.
    assert run_locally(plan_graph({1: 10, ("t", 0): 20, "x": (add, 1, ("t", 0))}, ["x"])) == {"x": 30}
    # A value that is no key is a literal too, a string included.
    assert plan_graph({"s": "y"}, ["s"]).literals == {"s": "y"}


@pytest.mark.parametrize("order", ORDERS)
def test_missing_requested_key_is_a_key_error_and_a_value_error(order: Any) -> None:
    with pytest.raises(GraphKeyError, match="'nope' is not in the graph") as raised:
        plan_graph(DOCUMENT_003_GRAPH, ["e", "nope"], order=order)
    assert isinstance(raised.value, KeyError) and isinstance(raised.value, ValueError)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    "graph",
    [
        {"a": (inc, "a")},
        {"a": (inc, "b"), "b": (inc, "a")},
        {"a": (inc, "b"), "b": (add, 1, "c"), "c": (total, ["d"]), "d": (inc, "a")},
        {"a": (inc, "b"), "b": "c", "c": (inc, "a")},
        {"a": "b", "b": "a"},
    ],
    ids=["self", "two", "through-a-container", "through-an-alias", "aliases"],
)
def test_cycles_are_value_errors_before_anything_runs(graph: dict, order: Any) -> None:
    with pytest.raises(GraphError, match="cycle") as raised:
        plan_graph(graph, ["a"], order=order)
    assert isinstance(raised.value, graphlib.CycleError)  # what code written for Scaler 1.9.x catches
    assert_is_a_cycle_of(graph, raised.value.args[1])


def assert_is_a_cycle_of(graph: dict, cycle: list) -> None:
    """graphlib's form: each key a dependency (directly, or through aliases) of the next; first == last."""
    assert len(cycle) >= 2 and cycle[0] == cycle[-1], cycle
    for needed, needing in zip(cycle, cycle[1:]):
        assert needed in _keys_needed(graph, needing), f"{needing!r} does not need {needed!r} in {cycle}"


def _keys_needed(graph: dict, key: Hashable) -> set:
    """The keys a key's value names, at any depth, and the keys those name when they are aliases."""
    found: set = set()
    stack = [graph[key]]
    while stack:
        item = stack.pop()
        try:
            named = item in graph
        except TypeError:  # unhashable: a list, or a tuple holding one
            named = False
        if named:
            if item not in found:
                found.add(item)
                if not is_task(graph[item]):
                    stack.append(graph[item])  # an alias: what it names is needed too
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found


def test_a_key_requested_twice_is_a_key_error() -> None:
    with pytest.raises(DuplicateKeyError, match=r"more than once: \['c'\]") as raised:
        plan_graph(DOCUMENT_003_GRAPH, ["c", "d", "c", "c"])
    assert isinstance(raised.value, KeyError) and isinstance(raised.value, ValueError)


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="a graph is a dict"):
        plan_graph([("a", 1)], ["a"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="order must be"):
        plan_graph({"a": 1}, ["a"], order="fastest")


def test_the_cycle_collector_is_left_as_it_was() -> None:
    assert gc.isenabled()
    plan_graph({"a": (inc, 1)}, ["a"])
    assert gc.isenabled()
    with pytest.raises(GraphError):
        plan_graph({"a": (inc, "a")}, ["a"])
    assert gc.isenabled()
    gc.disable()
    try:
        plan_graph({"a": (inc, 1)}, ["a"])
        assert not gc.isenabled()
    finally:
        gc.enable()


def tree_reduction(leaves: int) -> tuple[dict, Hashable]:
    """`leaves` negations summed pairwise: 2 * leaves - 1 tasks."""
    graph: dict = {("leaf", i): (operator.neg, i) for i in range(leaves)}
    level = [("leaf", i) for i in range(leaves)]
    depth = 0
    while len(level) > 1:
        following = []
        for j in range(0, len(level) - 1, 2):
            graph[("sum", depth, j)] = (add, level[j], level[j + 1])
            following.append(("sum", depth, j))
        if len(level) % 2:
            following.append(level[-1])
        level = following
        depth += 1
    return graph, level[0]


def function_runs(plan: GraphPlan) -> int:
    """How many groups the submission has: runs of calls of the same function and arity."""
    runs, previous = 0, None
    for call in plan.calls:
        kind = (call.function, len(call.arguments))
        if kind != previous:
            runs, previous = runs + 1, kind
    return runs


@pytest.mark.parametrize("order", ORDERS)
def test_a_100k_node_tree_reduction_goes_out_in_few_groups(order: Any) -> None:
    graph, root = tree_reduction(50_000)
    plan = plan_graph(graph, [root], order=order)
    assert len(plan.calls) == 99_999
    assert_valid_order(plan)
    assert function_runs(plan) <= 3  # all negations, then all sums, whatever the interleaving in the graph
    assert run_locally(plan) == {root: -sum(range(50_000))}


def test_a_long_chain_needs_no_recursion() -> None:
    graph: dict = {f"x{i + 1}": (inc, f"x{i}") for i in range(50_000)}
    graph["x0"] = 0
    for order in (None, "python"):
        assert run_locally(plan_graph(graph, ["x50000"], order=order)) == {"x50000": 50_000}


@pytest.mark.skipif(not HAVE_GRAPHBLAS, reason="no graphblas")
def test_graphblas_and_python_orders_agree_on_validity() -> None:
    dependencies = {("n", i): [("n", j) for j in (i // 2, i // 3, i - 1) if 0 <= j < i] for i in range(2000)}
    for ordering in (topological_order, graphblas_order):
        ordered = ordering(dependencies)
        position = {key: index for index, key in enumerate(ordered)}
        assert len(position) == len(dependencies)
        assert all(position[needed] < position[key] for key, needs in dependencies.items() for needed in needs)
    assert graphblas_order({}) == []
    with pytest.raises(GraphError, match="cycle") as raised:
        graphblas_order({"a": ["b"], "b": ["a"], "c": []})
    assert isinstance(raised.value, graphlib.CycleError) and raised.value.args[1] in (["a", "b", "a"], ["b", "a", "b"])


# ---------------------------------------------------------------------------------------------- properties


@st.composite
def random_graphs(draw: st.DrawFn) -> tuple[dict, list]:
    """DAGs of keys (strings and tuples) holding literals, aliases and tasks with every kind of argument."""
    size = draw(st.integers(1, 25))
    keys: list[Hashable] = [draw(st.sampled_from([f"k{i}", ("k", i), ("k", i, "x")])) for i in range(size)]
    graph: dict = {}
    for index, key in enumerate(keys):
        earlier = keys[:index]
        choice = draw(st.sampled_from(["literal", "alias", "task", "task"]) if earlier else st.just("literal"))
        if choice == "literal":
            graph[key] = draw(st.integers(-5, 5))
        elif choice == "alias":
            graph[key] = draw(st.sampled_from(earlier))
        else:
            arguments = draw(st.lists(_argument(earlier), min_size=0, max_size=4))
            graph[key] = (total, *arguments)
    requested = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=4, unique=True))
    return graph, requested


def _argument(earlier: list) -> st.SearchStrategy:
    leaf = st.one_of(st.sampled_from(earlier), st.integers(-3, 3))
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),  # a tuple of keys, not a task: its first item is no callable
            st.lists(inner, max_size=3).map(lambda items: (total, *items)),
        ),
        max_leaves=5,
    )


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.sampled_from([None, "python", "graphblas"] if HAVE_GRAPHBLAS else [None, "python"]))
def test_any_dag_plans_to_its_meaning_in_a_valid_order(case: tuple[dict, list], order: Any) -> None:
    graph, requested = case
    plan = plan_graph(graph, requested, order=order)
    assert_valid_order(plan)
    assert run_locally(plan) == {key: evaluate(graph, key) for key in requested}


@settings(max_examples=examples(50), deadline=None)
@given(random_graphs(), st.data())
def test_a_reachable_back_edge_is_always_found(case: tuple[dict, list], data: st.DataObject) -> None:
    graph, _ = case
    keys = list(graph)
    first = data.draw(st.integers(0, len(keys) - 1))
    # The first key now needs the last one, which (transitively, maybe) needs it: a cycle through `first`
    # once the last key needs the first, made sure of by a task on it.
    graph[keys[-1]] = (total, keys[first], 1)
    graph[keys[first]] = (total, keys[-1])
    for order in (None, "python"):
        with pytest.raises(GraphError, match="cycle") as raised:
            plan_graph(graph, [keys[first]], order=order)
        assert_is_a_cycle_of(graph, raised.value.args[1])
