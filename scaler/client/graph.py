"""Turning a task graph into an ordered list of calls whose arguments may wait on other calls.

A graph is a dict. Each value is
- a task: a tuple `(callable, arg, ...)`; an argument is a key of the graph, a literal, a nested task,
  or a list/tuple nesting any of those;
- an alias: another key of the graph;
- anything else: a literal value (a callable on its own is a literal too, returned as it is).

`plan_graph` checks the graph (missing keys, cycles), keeps only what the requested keys need, and
orders the tasks so that every task comes after the tasks it depends on. Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Callable


class GraphError(ValueError):
    """The graph cannot be computed: a requested key is missing, or there is a cycle."""


@dataclasses.dataclass(frozen=True)
class Slot:
    """Stands in a call template for the value of the dependency at `index`."""

    index: int


@dataclasses.dataclass
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


def plan_graph(graph: Mapping, keys: Sequence[Hashable], order: Callable | None = None) -> GraphPlan:
    """Check and order `graph` for computing `keys`; raises GraphError before anything runs."""
    if not isinstance(graph, Mapping):
        raise TypeError(f"a graph is a dict of key -> value or (callable, args...), got {type(graph).__name__}")
    for key in keys:
        if not _is_key(key, graph):
            raise GraphError(f"requested key {key!r} is not in the graph")

    def resolve(key: Hashable) -> Hashable:
        """Follow aliases (a value that is itself a key) to the key holding a task or a literal."""
        value = graph[key]
        if is_task(value) or not _is_key(value, graph):
            return key  # the common case: no alias
        seen = {key}
        target = key
        while not is_task(value) and _is_key(value, graph):
            if value in seen:
                raise GraphError(f"cycle of aliases through key {key!r}")
            seen.add(value)
            target, value = value, graph[value]
        return target

    # Walk back from the requested keys: only what they need is planned.
    planned: dict[Hashable, PlannedCall] = {}
    literal_keys: set[Hashable] = set()
    stack = [resolve(key) for key in keys]
    while stack:
        key = stack.pop()
        if key in planned or key in literal_keys:
            continue
        value = graph[key]
        if not is_task(value):
            literal_keys.add(key)
            continue
        call = _plan_call(key, value, graph, resolve)
        planned[key] = call
        stack.extend(call.reference_slots.values())

    dependencies = {key: list(call.reference_slots.values()) for key, call in planned.items()}
    ordered = (order or topological_order)(dependencies)
    literals = {}
    targets = {}
    for key in keys:
        target = resolve(key)
        if target in literal_keys:
            literals[key] = graph[target]
        else:
            targets[key] = target
    return GraphPlan(calls=[planned[key] for key in ordered], literals=literals, targets=targets)


def _plan_call(key: Hashable, task: tuple, graph: Mapping, resolve: Callable[[Hashable], Hashable]) -> PlannedCall:
    function, raw_arguments = task[0], task[1:]
    arguments: list[Any] = []
    reference_slots: dict[int, Hashable] = {}
    for position, argument in enumerate(raw_arguments):
        try:
            in_graph = argument in graph
        except TypeError:
            in_graph = False
        if in_graph:
            target = resolve(argument)
            value = graph[target]
            if is_task(value):
                reference_slots[position] = target
                arguments.append(None)
            else:
                arguments.append(value)
        elif type(argument) in (list, tuple) and _has_key_or_task(argument, graph):
            return _plan_template_call(key, task, graph, resolve)
        else:
            arguments.append(argument)
    return PlannedCall(key=key, function=function, arguments=arguments, reference_slots=reference_slots)


def _plan_template_call(
    key: Hashable, task: tuple, graph: Mapping, resolve: Callable[[Hashable], Hashable]
) -> PlannedCall:
    """A dependency or a nested task sits inside a container: ship a template and fill it on the worker."""
    slot_keys: list[Hashable] = []
    slot_of: dict[Hashable, int] = {}

    def to_template(item: Any) -> Any:
        if _is_key(item, graph):
            target = resolve(item)
            if not is_task(graph[target]):
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


def _has_key_or_task(container: Any, graph: Mapping) -> bool:
    stack = [container]
    while stack:
        item = stack.pop()
        if type(item) in (list, tuple):
            if is_task(item):
                return True
            stack.extend(item)
        elif _is_key(item, graph):
            return True
    return False


def topological_order(dependencies: Mapping[Hashable, Sequence[Hashable]]) -> list[Hashable]:
    """Kahn's algorithm: every key after its dependencies; GraphError naming part of a cycle if any."""
    remaining = {key: len(needed) for key, needed in dependencies.items()}
    dependents: dict[Hashable, list[Hashable]] = {key: [] for key in dependencies}
    for key, needed in dependencies.items():
        for dependency in needed:  # a repeated dependency is counted, and released, once per use
            dependents[dependency].append(key)
    ready = [key for key, count in remaining.items() if count == 0]
    ordered: list[Hashable] = []
    while ready:
        key = ready.pop()
        ordered.append(key)
        for dependent in dependents[key]:
            remaining[dependent] -= 1
            if remaining[dependent] == 0:
                ready.append(dependent)
    if len(ordered) != len(dependencies):
        stuck = sorted((repr(key) for key, count in remaining.items() if count > 0))[:5]
        raise GraphError(f"the graph has a cycle involving {', '.join(stuck)}")
    return ordered
