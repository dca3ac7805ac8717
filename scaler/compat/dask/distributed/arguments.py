"""Futures among a task's arguments, turned into top-level arguments of the native submit.

The native client resolves a kept future (or an ObjectReference) on the cluster only where it is a whole
argument. A future at the top level goes as it is. Futures inside lists, tuples, sets or dicts are taken
out, each replaced by a numbered slot, and go as extra top-level arguments of `fill_slots`, which puts
their values back into the structure on the worker and calls the function: their values never pass
through the client. A namedtuple holding futures is made again there from its constructor's arguments.

A dask collection whose graph holds futures (a persisted collection) is taken apart the same way: each
future of its graph becomes a slot, and the worker makes the collection again (its `__dask_postpersist__`)
from a graph holding the values instead, so the task can compute with it there. Its futures are held until
the task ends, as any argument's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
from typing import Any, Callable

from scaler.compat.dask.distributed.future import Future, KeyState

# Keywords the native submit takes for itself: a function's own keyword of these names goes through fill_slots.
NATIVE_KEYWORDS = frozenset({"profiling", "tags", "priority", "keep"})
_CONTAINERS = (list, tuple, set, frozenset, dict)


@dataclasses.dataclass
class PreparedCall:
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]
    dependencies: list[KeyState]  # the keys this call reads, held until it has ended


class _Slot:
    """Where the value of the extra argument number `index` goes back into the structure."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> tuple:
        return _Slot, (self.index,)


class _Rebuilt:
    """A namedtuple that held futures: made again on the worker from its constructor's arguments, filled."""

    __slots__ = ("kind", "args", "kwargs")

    def __init__(self, kind: type, args: tuple, kwargs: dict[str, Any]) -> None:
        self.kind, self.args, self.kwargs = kind, args, kwargs

    def __reduce__(self) -> tuple:
        return _Rebuilt, (self.kind, self.args, self.kwargs)


class _RebuiltCollection:
    """A dask collection that held futures, now a slot in their place (`shell`): made again on the worker with
    the values filled in. Its graph is only a few references per chunk, whatever the data's size."""

    __slots__ = ("shell",)

    def __init__(self, shell: Any) -> None:
        self.shell = shell

    def __reduce__(self) -> tuple:
        return _RebuiltCollection, (self.shell,)

    def filled(self, values: tuple) -> Any:
        return _rebuilt(self.shell, lambda item: values[item.index] if type(item) is _Slot else None)


def _rebuilt(collection: Any, value_of: Callable[[Any], Any]) -> Any:
    """The collection again, each graph value that `value_of` maps (to something else than None) replaced."""
    from dask._task_spec import DataNode

    graph = dict(collection.__dask_graph__())
    for key, value in graph.items():
        replacement = value_of(value.value if isinstance(value, DataNode) else value)
        if replacement is not None:
            graph[key] = DataNode(key, replacement)
    rebuild, rebuild_args = collection.__dask_postpersist__()
    return rebuild(graph, *rebuild_args)


def _is_collection(item: Any) -> bool:
    from dask import is_dask_collection

    return is_dask_collection(item)


def _graph_futures(item: Any) -> dict[Any, Future]:
    """The futures among a dask collection's graph values, by key."""
    from dask._task_spec import DataNode

    found: dict[Any, Future] = {}
    for key, value in dict(item.__dask_graph__()).items():
        if isinstance(value, DataNode):
            value = value.value
        if isinstance(value, Future):
            found[key] = value
    return found


def _is_namedtuple(item: Any) -> bool:
    return isinstance(item, tuple) and type(item) is not tuple and hasattr(type(item), "_fields")


def _constructor_arguments(item: tuple) -> tuple[tuple, dict[str, Any]]:
    """What a namedtuple (also one with its own __new__) is made from again, as pickle would."""
    new_args_ex = getattr(item, "__getnewargs_ex__", None)
    if new_args_ex is not None:
        args, kwargs = new_args_ex()
        return tuple(args), dict(kwargs)
    return tuple(item.__getnewargs__()), {}  # type: ignore[attr-defined]  # every namedtuple class defines it


def fill_slots(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], *values: Any) -> Any:
    """On the worker: call `fn` with each slot of `args` and `kwargs` replaced by its value."""
    return fn(*_filled(args, values), **_filled(kwargs, values))


def _filled(template: Any, values: tuple) -> Any:
    kind = type(template)
    if kind is _Slot:
        return values[template.index]
    if kind is dict:
        return {key: _filled(item, values) for key, item in template.items()}
    if kind in _CONTAINERS:
        return kind(_filled(item, values) for item in template)
    if kind is _Rebuilt:
        return template.kind(*_filled(template.args, values), **_filled(template.kwargs, values))
    if kind is _RebuiltCollection:
        return template.filled(values)  # type: ignore[attr-defined]
    return template


def prepare_call(
    fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any],
    argument_of: Callable[[KeyState], Any] = KeyState.argument,
) -> PreparedCall:
    """The native call for `fn(*args, **kwargs)`; `argument_of` gives what stands for a future's key: by default
    its kept native future (or, scattered, its object's reference), which the native client resolves on the
    cluster as a top-level argument. A coroutine function runs to its end on the worker, as in dask."""
    if _is_coroutine_function(fn):
        fn, args = run_coroutine, (fn, *args)
    dependencies: list[KeyState] = []
    nested = False
    direct_args: list[Any] = []
    for argument in args:
        if isinstance(argument, Future):
            dependencies.append(argument._state)
            direct_args.append(argument_of(argument._state))
        else:
            nested = nested or _holds_future(argument)
            direct_args.append(argument)
    direct_kwargs: dict[str, Any] = {}
    for name, argument in kwargs.items():
        if isinstance(argument, Future):
            dependencies.append(argument._state)
            direct_kwargs[name] = argument_of(argument._state)
        else:
            nested = nested or _holds_future(argument)
            direct_kwargs[name] = argument
    if not nested and NATIVE_KEYWORDS.isdisjoint(kwargs):
        return PreparedCall(fn, tuple(direct_args), direct_kwargs, dependencies)
    # Every future, at the top level too, becomes a slot: one way to read the call on the worker.
    dependencies = []
    values: list[Any] = []

    def replace(item: Any) -> Any:
        if isinstance(item, Future):
            dependencies.append(item._state)
            values.append(argument_of(item._state))
            return _Slot(len(values) - 1)
        kind = type(item)
        if kind is dict:
            return {key: replace(value) for key, value in item.items()}
        if kind in _CONTAINERS:
            return kind(replace(value) for value in item)
        if _is_namedtuple(item) and _holds_future(item):
            args, kwargs = _constructor_arguments(item)
            return _Rebuilt(kind, replace(args), replace(kwargs))
        if _is_collection(item) and _graph_futures(item):
            shell = _rebuilt(item, lambda value: replace(value) if isinstance(value, Future) else None)
            return _RebuiltCollection(shell)
        return item

    template_args = tuple(replace(argument) for argument in args)
    template_kwargs = {name: replace(argument) for name, argument in kwargs.items()}
    return PreparedCall(fill_slots, (fn, template_args, template_kwargs, *values), {}, dependencies)


def run_coroutine(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """On the worker: the value of the coroutine `fn(*args, **kwargs)`, run in an event loop of its own."""
    return asyncio.run(fn(*args, **kwargs))


def _is_coroutine_function(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn)


def _holds_future(item: Any) -> bool:
    kind = type(item)
    if kind is dict:
        return any(_holds_future(value) for value in item.values())
    if kind in _CONTAINERS or _is_namedtuple(item):
        return any(_holds_future(value) for value in item)
    if isinstance(item, Future):
        return True
    return hasattr(item, "__dask_graph__") and _is_collection(item) and bool(_graph_futures(item))


def futures_in(item: Any) -> list[Future]:
    """The futures in `item`: a future, nested lists/tuples/sets/dicts of them, or dask collections whose
    graphs hold them (a persisted collection); in order, each once."""
    found: dict[int, Future] = {}
    _collect(item, found)
    return list(found.values())


def _collect(item: Any, found: dict[int, Future]) -> None:
    if isinstance(item, Future):
        found.setdefault(id(item), item)
        return
    kind = type(item)
    if kind is dict:
        for value in item.values():
            _collect(value, found)
    elif kind in _CONTAINERS or _is_namedtuple(item):
        for value in item:
            _collect(value, found)
    elif hasattr(item, "__dask_graph__"):
        from dask._task_spec import DataNode

        for value in dict(item.__dask_graph__()).values():
            if isinstance(value, DataNode):
                value = value.value
            if isinstance(value, Future):
                found.setdefault(id(value), value)
