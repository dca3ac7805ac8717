"""Turning a task graph into an ordered list of calls whose arguments may wait on other calls.

A graph is a dict. Each value is
- a task: a tuple `(callable, arg, ...)`; an argument is a key of the graph, a literal, a nested task,
  or a list/tuple nesting any of those;
- an alias: another key of the graph;
- a ScalerFuture of this client submitted with keep=True: the task's result, kept on the cluster; a task
  that names its key receives it there (a reference to its task), as it would another task's result;
- anything else: a literal value (a callable on its own is a literal too, returned as it is).

`plan_graph` checks the graph (missing keys, cycles), keeps only what the requested keys need, and
orders the tasks so that every task comes after the tasks it depends on. Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Callable, Union

from scaler.client.future import ScalerFuture
from scaler.client.graph_errors import DuplicateKeyError, GraphCycleError, GraphError, GraphKeyError
from scaler.client.graph_order import topological_order


@dataclasses.dataclass(frozen=True)
class Slot:
    """Stands in a call template for the value of the dependency at `index`."""

    index: int


@dataclasses.dataclass(slots=True)
class PlannedCall:
    """One task: `function(*arguments)`, where arguments at `reference_slots` are results of other tasks.

    When a dependency sits inside a container or a nested task, the call is wrapped: `function` is a
    `TemplateCall` and the single literal argument is the template the worker fills in.
    """

    key: Hashable
    function: Callable[..., Any]
    arguments: list[Any]
    # position in `arguments` -> key of the task whose result goes there
    reference_slots: dict[int, Hashable]


@dataclasses.dataclass
class GraphPlan:
    calls: list[PlannedCall]       # dependencies first
    literals: dict[Hashable, Any]  # requested keys whose value needs no computation
    targets: dict[Hashable, Hashable]  # requested key -> the key of the task computing it
    # Keys whose value is a future (kept results): calls may reference them as they reference tasks.
    futures: dict[Hashable, ScalerFuture] = dataclasses.field(default_factory=dict)


class TemplateCall:
    """Runs `function(*template)` after putting dependency values where the template has Slots.

    Also evaluates nested tasks `(callable, ...)` inside the template, as dask does.
    """

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        # Error messages on the worker name the user's function, not this wrapper.
        self.name = getattr(function, "__qualname__", type(function).__name__)

    def __call__(self, template: tuple, *values: Any) -> Any:
        return self.function(*(_fill(item, values) for item in template))

    def __repr__(self) -> str:
        return f"TemplateCall({getattr(self.function, '__qualname__', self.function)!r})"


def _fill(item: Any, values: tuple) -> Any:
    kind = type(item)
    if kind is Slot:
        return values[item.index]
    if kind is list:
        return [_fill(element, values) for element in item]
    if kind is tuple:
        if item and callable(item[0]):
            return item[0](*(_fill(element, values) for element in item[1:]))
        return tuple(_fill(element, values) for element in item)
    return item


def is_task(value: Any) -> bool:
    return type(value) is tuple and len(value) > 0 and callable(value[0])


def _is_key(value: Any, graph: Mapping) -> bool:
    try:
        return value in graph
    except TypeError:  # unhashable: a literal
        return False


# `order` of plan_graph: None, one of these names, or a function of the same contract as topological_order.
Order = Union[None, str, Callable[[Mapping[Hashable, Sequence[Hashable]]], list]]


def plan_graph(graph: Mapping, keys: Sequence[Hashable], order: Order = None) -> GraphPlan:
    """Check and order `graph` for computing `keys`; raises GraphError before anything runs.

    `order` chooses how the tasks are put in dependency order:
    - None (the default): the walk that collects the tasks the keys need orders them as it goes, depth
      first, and finds cycles on the way; no separate pass over the edges. Fastest in pure Python.
    - "python": Kahn's algorithm (`topological_order`) over the collected tasks.
    - "graphblas": sparse matrix products, wave by wave (`graph_order_graphblas.graphblas_order`, needs
      the `graphblas` extra).
    - a function taking `{key: [keys it depends on]}` and returning the keys dependencies first.
    Whichever it is, the calls then go out wave by wave, grouped by function (see `_by_wave_and_function`).
    """
    order = _order_function(order)
    if not isinstance(graph, Mapping):
        raise TypeError(f"a graph is a dict of key -> value or (callable, args...), got {type(graph).__name__}")
    for key in keys:
        if not _is_key(key, graph):
            raise GraphKeyError(key)
    if len(set(keys)) != len(keys):
        raise DuplicateKeyError(_repeated(keys))
    # Planning allocates an object or three per task and frees none of them: cycle collections
    # triggered meanwhile would only rescan the growing plan, about half the time for a large graph.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _plan(graph, keys, order)
    finally:
        if collecting:
            gc.enable()


def _order_function(order: Order) -> Callable[[Mapping[Hashable, Sequence[Hashable]]], list] | None:
    if order is None or callable(order):
        return order
    if order == "python":
        return topological_order
    if order == "graphblas":
        from scaler.client.graph_order_graphblas import graphblas_order

        return graphblas_order
    raise ValueError(f'order must be None, "python", "graphblas" or a function, got {order!r}')


def _plan(graph: Mapping, keys: Sequence[Hashable], order: Callable[[Mapping], list] | None) -> GraphPlan:
    def resolve(key: Hashable) -> Hashable:
        """Follow aliases (a value that is itself a key) to the key holding a task or a literal."""
        value = graph[key]
        if is_task(value) or not _is_key(value, graph):
            return key  # the common case: no alias
        chain = [key]
        target = key
        while not is_task(value) and _is_key(value, graph):
            if value in chain:
                loop = chain[chain.index(value):]
                raise GraphCycleError(f"cycle of aliases through key {key!r}", [*reversed(loop), loop[-1]])
            chain.append(value)
            target, value = value, graph[value]
        return target

    roots = [resolve(key) for key in reversed(keys)]
    literal_keys: set[Hashable] = set()
    if order is None:
        calls = _walk_depth_first(graph, roots, resolve, literal_keys)
    else:
        planned = _walk(graph, roots, resolve, literal_keys)
        ordered = order({
            key: [dependency for dependency in call.reference_slots.values() if dependency in planned]
            for key, call in planned.items()
        })
        if len(ordered) != len(planned):
            raise GraphError(f"the order gave {len(ordered)} of the {len(planned)} tasks")
        calls = [planned[key] for key in ordered]
    calls = _by_wave_and_function(calls)
    literals = {}
    targets = {}
    for key in keys:
        target = resolve(key)
        if target in literal_keys:
            literals[key] = graph[target]
        else:
            targets[key] = target
    futures = {key: graph[key] for key in literal_keys if isinstance(graph[key], ScalerFuture)}
    return GraphPlan(calls=calls, literals=literals, targets=targets, futures=futures)


def _walk_depth_first(
    graph: Mapping, roots: list[Hashable], resolve: Callable[[Hashable], Hashable], literal_keys: set[Hashable]
) -> list[PlannedCall]:
    """Plan what the roots need, walking back from them depth first; returns the calls in topological order.

    A task is finished (appended to `planned`) once everything it depends on is, so the walk that culls
    the graph orders it too, and meeting a task that is still on the current path is a cycle.
    """
    planned: dict[Hashable, PlannedCall] = {}
    started: dict[Hashable, PlannedCall] = {}  # on the current path: waiting for its dependencies
    stack = list(roots)
    pop, push = stack.pop, stack.append
    while stack:
        key = stack[-1]
        call = started.pop(key, None)
        if call is not None:  # back to it: its dependencies are planned now
            pop()
            planned[key] = call
            continue
        if key in planned or key in literal_keys:
            pop()
            continue
        value = graph[key]
        if type(value) is not tuple or not value or not callable(value[0]):
            literal_keys.add(key)
            pop()
            continue
        call = _plan_call(key, value, graph, resolve)
        if not call.reference_slots:
            pop()
            planned[key] = call
            continue
        started[key] = call
        waits = False
        for dependency in call.reference_slots.values():
            if dependency in planned:
                continue
            if dependency in started:
                cycle = _cycle_through(key, dependency, started)
                raise GraphCycleError(f"the graph has a cycle through {dependency!r} and {key!r}", cycle)
            push(dependency)
            waits = True
        if not waits:
            del started[key]
            pop()
            planned[key] = call
    return list(planned.values())


def _walk(
    graph: Mapping, roots: list[Hashable], resolve: Callable[[Hashable], Hashable], literal_keys: set[Hashable]
) -> dict[Hashable, PlannedCall]:
    """Plan what the roots need, in no particular order: an `order` function orders them and finds cycles."""
    planned: dict[Hashable, PlannedCall] = {}
    stack = list(roots)
    pop, extend = stack.pop, stack.extend
    while stack:
        key = pop()
        if key in planned or key in literal_keys:
            continue
        value = graph[key]
        if type(value) is not tuple or not value or not callable(value[0]):
            literal_keys.add(key)
            continue
        call = planned[key] = _plan_call(key, value, graph, resolve)
        extend(call.reference_slots.values())
    return planned


def _by_wave_and_function(calls: list[PlannedCall]) -> list[PlannedCall]:
    """Reorder topologically ordered calls by wave (longest path from a leaf), then by function.

    Calls of one function in a row travel as one group of the submission, and the scheduler handles
    groups, not calls, on its hot path: a tree reduction goes out as a few groups instead of one per
    call. Waves keep the order topological, and the scheduler runs calls in waves anyway.
    """
    count = len(calls)
    wave_of: dict[Hashable, int] = {}
    kind_index: dict[tuple[int, int], int] = {}
    sort_keys: list[int] = []
    for call in calls:
        wave = 0
        for dependency in call.reference_slots.values():
            dependency_wave = wave_of.get(dependency, -1)  # -1: a future, computed already or elsewhere
            if dependency_wave >= wave:
                wave = dependency_wave + 1
        wave_of[call.key] = wave
        function = call.function
        kind = (id(function.function if type(function) is TemplateCall else function), len(call.arguments))
        index = kind_index.get(kind)
        if index is None:
            index = kind_index[kind] = len(kind_index)
        sort_keys.append(wave * count + index)
    if len(kind_index) == 1:
        return calls  # one group whatever the order
    return [calls[position] for position in sorted(range(count), key=sort_keys.__getitem__)]


def _plan_call(key: Hashable, task: tuple, graph: Mapping, resolve: Callable[[Hashable], Hashable]) -> PlannedCall:
    arguments = list(task)
    function = arguments.pop(0)
    reference_slots: dict[int, Hashable] = {}
    for position, argument in enumerate(arguments):
        kind = type(argument)
        if kind is list:  # never a key: unhashable
            if _has_key_or_task(argument, graph):
                return _plan_template_call(key, task, graph, resolve)
            continue
        try:
            in_graph = argument in graph
        except TypeError:  # unhashable: a literal, or a tuple holding a list
            in_graph = False
        if in_graph:
            value = graph[argument]
            if type(value) is tuple and value and callable(value[0]):
                reference_slots[position] = argument
                arguments[position] = None
                continue
            target = resolve(argument)
            value = graph[target]
            if is_task(value) or isinstance(value, ScalerFuture):
                reference_slots[position] = target
                arguments[position] = None
            else:
                arguments[position] = value
        elif kind is tuple and _has_key_or_task(argument, graph):
            return _plan_template_call(key, task, graph, resolve)
    return PlannedCall(key, function, arguments, reference_slots)


def _plan_template_call(
    key: Hashable, task: tuple, graph: Mapping, resolve: Callable[[Hashable], Hashable]
) -> PlannedCall:
    """A dependency or a nested task sits inside a container: ship a template and fill it on the worker."""
    slot_keys: list[Hashable] = []
    slot_of: dict[Hashable, int] = {}

    def to_template(item: Any) -> Any:
        if _is_key(item, graph):
            target = resolve(item)
            if not is_task(graph[target]) and not isinstance(graph[target], ScalerFuture):
                return graph[target]
            if target not in slot_of:
                slot_of[target] = len(slot_keys)
                slot_keys.append(target)
            return Slot(slot_of[target])
        if type(item) is list:
            return [to_template(element) for element in item]
        if type(item) is tuple:
            if is_task(item):
                return (item[0], *(to_template(element) for element in item[1:]))
            return tuple(to_template(element) for element in item)
        return item

    template = tuple(to_template(argument) for argument in task[1:])
    return PlannedCall(
        key=key,
        function=TemplateCall(task[0]),
        arguments=[template, *([None] * len(slot_keys))],
        reference_slots={1 + index: target for index, target in enumerate(slot_keys)},
    )


def _has_key_or_task(container: list | tuple, graph: Mapping) -> bool:
    """Whether a container argument holds a key or a task at any depth (a tuple may be a key itself)."""
    if is_task(container):
        return True
    stack = list(container)
    while stack:
        item = stack.pop()
        if _is_key(item, graph):
            return True
        if type(item) in (list, tuple):
            if is_task(item):
                return True
            stack.extend(item)
    return False


def _cycle_through(key: Hashable, dependency: Hashable, on_path: Mapping[Hashable, PlannedCall]) -> list[Hashable]:
    """The cycle closed by `key` needing `dependency`, which needs `key` through tasks still on the walk's path.

    Breadth first from `dependency` to `key`; returned in graphlib's order (each a dependency of the next).
    """
    came_from: dict[Hashable, Hashable | None] = {dependency: None}
    frontier = [dependency]
    while key not in came_from and frontier:
        following = []
        for current in frontier:
            for needed in on_path[current].reference_slots.values() if current in on_path else ():
                if needed not in came_from:
                    came_from[needed] = current
                    following.append(needed)
        frontier = following
    path: list[Hashable] = []
    step: Hashable | None = key
    while step is not None:  # key back to dependency: each one a dependency of the next
        path.append(step)
        step = came_from.get(step)
    return [*path, key]


def _repeated(keys: Sequence[Hashable]) -> list[Hashable]:
    seen: set[Hashable] = set()
    repeated: list[Hashable] = []
    for key in keys:
        if key in seen and key not in repeated:
            repeated.append(key)
        seen.add(key)
    return repeated
