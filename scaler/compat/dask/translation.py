"""Turning what dask hands a scheduler into a graph that `Client.get` computes.

dask gives a scheduler's `get` an expression (with `__dask_graph__()`), a `HighLevelGraph`, or a dict
whose values are task-spec nodes (`dask._task_spec`: Task, Alias, DataNode, nested List/Tuple/Dict/Set
containers, keyword arguments) or legacy values (tuples `(func, *args)`, lists, literals). Walking back
from the requested keys, each node the keys need becomes what `plan_graph` reads:

- a legacy task whose arguments are keys or plain literals: kept as it is; it already means the same
  to `plan_graph` as to dask. Anything else legacy goes through dask's own `convert_legacy_task`.
- a plain task-spec Task (positional arguments that are references or plain literals):
  `(func, *args)` with references replaced by keys. No wrapper runs on the worker.
- an Alias: its target key, which `plan_graph` follows.
- a DataNode: its value (behind a one-line task when `plan_graph` would read the value as a key or a task).
- anything else (keyword arguments, nested tasks and containers, fused subgraphs, subclasses):
  `(run_nodes, NodeCall(...), *dependency keys)`: the worker calls the node with `{key: value}` of its
  dependencies, exactly as dask's own schedulers do, so dask's semantics stay dask's.

Small tasks do not pay for distribution twice: chain links, and tiny leaf tasks of large graphs, run
inside their only dependent (see `_fusion_groups`), as nested tasks when they are plain.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any, Callable

from dask._task_spec import Alias, DataNode, GraphNode, Task, TaskRef, convert_legacy_task
from dask.utils import ensure_dict

from scaler.client.graph import GraphCycleError, GraphError, GraphKeyError, is_task
from scaler.compat.dask.kept_refs import kept_future_of

# Tasks without dependencies are folded into their only dependent when the graph has at least this
# many of them (a few expensive loads keep their parallelism), and at most this many per dependent.
LEAF_FUSION_MIN_LEAVES = 256
LEAF_FUSION_MAX_PER_DEPENDENT = 4
# Plain fused tasks nest as `(f, (g, (h, ...)))` up to this depth; deeper chains run as one NodeCall.
MAX_NESTING = 32

# Arguments of these types that are keys of the graph are references in a legacy dask task.
_KEY_TYPES = (str, int, float, tuple)
_CONTAINERS = (list, tuple, set, frozenset, dict)


class NodeCall:
    """Task-spec nodes to run in order on a worker; the last one's value is the result."""

    __slots__ = ("nodes", "dependency_keys")

    def __init__(self, nodes: tuple[GraphNode, ...], dependency_keys: tuple[Hashable, ...]) -> None:
        self.nodes = nodes
        self.dependency_keys = dependency_keys

    def __reduce__(self) -> tuple:
        return NodeCall, (self.nodes, self.dependency_keys)

    def __repr__(self) -> str:
        return f"NodeCall({[node.key for node in self.nodes]!r})"


def run_nodes(call: NodeCall, *dependency_values: Any) -> Any:
    """On the worker: compute the nodes of `call` given the values of the keys they depend on."""
    values = dict(zip(call.dependency_keys, dependency_values))
    result = None
    for node in call.nodes:
        result = values[node.key] = node(values)
    return result


class Literal:
    """A value that `plan_graph` would otherwise read as a key or a task."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> tuple:
        return Literal, (self.value,)


def literal_value(literal: Literal) -> Any:
    return literal.value


@dataclasses.dataclass
class Translation:
    graph: dict[Hashable, Any]  # for Client.get
    requested: list[Hashable]  # the keys to ask Client.get for, each once
    node_count: int  # dask nodes needed by the requested keys
    task_count: int  # tasks the translated graph runs for them
    # head key -> the keys that run inside its task (the head last), for the tasks fused from several nodes
    fused: dict[Hashable, list[Hashable]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Needed:
    """The nodes the requested keys need, translated one by one."""

    source: dict[Hashable, Any]  # the whole dask graph
    values: dict[Hashable, Any] = dataclasses.field(default_factory=dict)  # key -> value for plan_graph
    dependencies: dict[Hashable, tuple] = dataclasses.field(default_factory=dict)
    plain: set[Hashable] = dataclasses.field(default_factory=set)  # values `(func, *keys or literals)`
    nodes: dict[Hashable, GraphNode] = dataclasses.field(default_factory=dict)  # task-spec form, where made
    # What a key outside the graph stands for (a future's key), else None; see `translate`.
    outside: Callable[[Hashable], Any] | None = None
    # Keys from outside the graph: never fused into their dependents (a task reading an object must stay whole).
    outside_keys: set[Hashable] = dataclasses.field(default_factory=set)
    # Keys whose value stands for a future's (see `translate`): references to them become plain TaskRefs.
    future_keys: frozenset[Hashable] = frozenset()

    def node(self, key: Hashable) -> GraphNode:
        node = self.nodes.get(key)
        if node is None:
            node = self.nodes[key] = _task_spec_node(key, self.source[key], self.source)
        return node


def graph_of(dsk: Any) -> dict[Hashable, Any]:
    """Whatever dask passes as `dsk`, as a plain dict of key -> node or legacy value."""
    if not isinstance(dsk, Mapping):
        graph_function = getattr(dsk, "__dask_graph__", None)
        if graph_function is None:
            raise TypeError(f"expected a dask graph (a mapping) or a dask collection, got {type(dsk).__name__}")
        dsk = graph_function()
    return ensure_dict(dsk)


def translate(
    dsk: Any, keys: list[Hashable], fuse: bool = True, outside: Callable[[Hashable], Any] | None = None,
    future_keys: frozenset[Hashable] = frozenset(),
) -> Translation:
    """Translate the part of a dask graph that `keys` need; raises before anything runs if it cannot run.

    A task may depend on a key that is not in the graph: a future's, which dask made a reference when the
    future stood among a task's arguments (it is a TaskRef). `outside(key)` gives the value that stands for it
    in the translated graph (a kept future, or a task reading an object), or None if it knows no such key;
    a persisted collection's KeptRef is found without it (kept_refs.py). A future object (a TaskRef subclass)
    left among a task's arguments, referring to an outside key or to one of `future_keys`, is replaced by a
    plain TaskRef of its key before the task travels: only its key matters on the worker."""
    source = graph_of(dsk)
    requested: list[Hashable] = []
    requested_set: set[Hashable] = set()
    for key in keys:
        try:
            present = key in source
        except TypeError:
            present = False
        if not present:
            raise GraphKeyError(key)
        if key not in requested_set:
            requested_set.add(key)
            requested.append(key)
    needed = _collect(source, requested, outside, future_keys)
    graph = needed.values
    if fuse:
        groups = _fusion_groups(needed, requested_set)
        for head, members in groups.items():
            graph[head] = _fused(needed, members)
        for members in groups.values():
            for key in members[:-1]:
                del graph[key]
    else:
        groups = {}
    task_count = sum(1 for value in graph.values() if is_task(value))
    return Translation(
        graph=graph, requested=requested, node_count=len(needed.dependencies), task_count=task_count, fused=groups
    )


def _collect(
    source: dict[Hashable, Any], requested: list[Hashable], outside: Callable[[Hashable], Any] | None = None,
    future_keys: frozenset[Hashable] = frozenset(),
) -> _Needed:
    """Walk back from the requested keys, translating each node they need once."""
    needed = _Needed(source=source, outside=outside, future_keys=future_keys)
    values, dependencies_of, plain = needed.values, needed.dependencies, needed.plain
    stack = list(requested)
    while stack:
        key = stack.pop()
        if key in values:
            continue
        raw = source[key]
        if type(raw) is tuple and raw and callable(raw[0]):
            dependencies = _plain_legacy_dependencies(raw, source)
            if dependencies is not None:
                values[key] = raw
                dependencies_of[key] = dependencies
                plain.add(key)
                stack.extend(dependencies)
                continue
        node = needed.node(key)
        if type(node) is Alias and node.target == key:  # type: ignore[attr-defined]
            # dask's form of `{key: future}`: the future's own key, standing for its value
            values[key] = _outside_value(needed, key, key)
            dependencies_of[key] = ()
            needed.outside_keys.add(key)
            continue
        dependencies = tuple(node.dependencies)
        references: dict[Hashable, TaskRef] | None = None
        for dependency in dependencies:
            if dependency not in source:
                if dependency not in values:
                    values[dependency] = _outside_value(needed, key, dependency)
                    dependencies_of[dependency] = ()
                    needed.outside_keys.add(dependency)
            elif dependency not in future_keys:
                continue
            if references is None:
                references = {}
            references[dependency] = TaskRef(dependency)
        if references and type(node) is not Alias:  # an alias travels as its target key, never as a node
            node = needed.nodes[key] = node.substitute(references)  # type: ignore[arg-type]  # Hashable keys
        value = _translate_node(node, source)
        values[key] = value
        dependencies_of[key] = dependencies
        if is_task(value) and value[0] is not run_nodes and value[0] is not literal_value:
            plain.add(key)
        stack.extend(dependencies)
    return needed


def _outside_value(needed: _Needed, key: Hashable, dependency: Hashable) -> Any:
    value = needed.outside(dependency) if needed.outside is not None else None
    if value is None:
        value = kept_future_of(dependency)  # a persisted collection's chunk (kept_refs.py)
    if value is None:
        raise GraphError(f"{key!r} depends on {dependency!r}, which is not in the graph")
    return value


def _plain_legacy_dependencies(task: tuple, source: dict) -> tuple | None:
    """The keys a legacy task takes, if each argument is a key or a plain literal; else None."""
    dependencies = []
    for argument in task[1:]:
        if isinstance(argument, _KEY_TYPES):
            try:
                is_key = argument in source
            except TypeError:  # a tuple holding something unhashable
                return None
            if is_key:
                dependencies.append(argument)
            elif isinstance(argument, tuple):
                return None  # a nested task, a tuple holding keys, a namedtuple: dask's conversion decides
        elif isinstance(argument, (_CONTAINERS, GraphNode, TaskRef)) or _is_key(argument, source):
            return None
    return tuple(dependencies)


def _task_spec_node(key: Hashable, raw: Any, source: dict) -> GraphNode:
    if isinstance(raw, GraphNode):
        return raw
    node = convert_legacy_task(key, raw, source)  # type: ignore[arg-type]  # dask keys are Hashable here
    if not isinstance(node, GraphNode) or (type(node) is Alias and node.target == key):
        return DataNode(key, raw)
    return node


def _translate_node(node: GraphNode, source: Mapping) -> Any:
    kind = type(node)
    if kind is Alias:
        return node.target  # type: ignore[attr-defined]
    if kind is DataNode:
        value = node.value  # type: ignore[attr-defined]
        if is_task(value) or _is_key(value, source):
            return (literal_value, Literal(value))
        return value
    if kind is Task and not node.kwargs:  # type: ignore[attr-defined]
        arguments = _plain_arguments(node.args, source)  # type: ignore[attr-defined]
        if arguments is not None:
            return (node.func, *arguments)  # type: ignore[attr-defined]
    return _node_call([node])


def _plain_arguments(arguments: tuple, source: Mapping) -> list[Any] | None:
    """Arguments for a plain `(func, *args)` task, or None if one needs the task-spec machinery."""
    plain = []
    for argument in arguments:
        kind = type(argument)
        if kind is TaskRef or kind is Alias:
            plain.append(argument.key if kind is TaskRef else argument.target)
        elif isinstance(argument, TaskRef):  # a future (a TaskRef subclass): its key, as for any reference
            plain.append(argument.key)
        elif kind is list or kind is tuple or isinstance(argument, (GraphNode, TaskRef)):
            return None  # containers may hold references; plan_graph would also look inside them
        elif _is_key(argument, source):
            return None  # a literal that plan_graph would read as a reference
        else:
            plain.append(argument)
    return plain


def _is_key(value: Any, source: Mapping) -> bool:
    try:
        return value in source
    except Exception:  # unhashable, or a hash that fails: not a key
        return False


def _node_call(nodes: list[GraphNode]) -> tuple:
    inside = {node.key for node in nodes}
    dependency_keys: list[Hashable] = []
    for node in nodes:
        for dependency in node.dependencies:
            if dependency not in inside and dependency not in dependency_keys:
                dependency_keys.append(dependency)
    return (run_nodes, NodeCall(tuple(nodes), tuple(dependency_keys)), *dependency_keys)


def _fusion_groups(needed: _Needed, requested: set[Hashable]) -> dict[Hashable, list[Hashable]]:
    """Which tasks run inside their only dependent: head key -> member keys, dependencies first, head last.

    Two kinds are absorbed, neither wanted by anyone else nor requested:
    - a link of a linear chain (its dependent has no other dependency): never loses parallelism;
    - a task without dependencies, when the graph has many of them (`LEAF_FUSION_MIN_LEAVES`) and its
      dependent takes few (`LEAF_FUSION_MAX_PER_DEPENDENT`): tiny leaves such as the inputs of a tree
      reduction stop costing a round trip each, while a handful of expensive loads keep their parallelism.
    """
    values, dependencies_of = needed.values, needed.dependencies
    dependents: dict[Hashable, list[Hashable]] = {}
    for key, dependencies in dependencies_of.items():
        for dependency in set(dependencies):
            dependents.setdefault(dependency, []).append(key)

    absorbed_into: dict[Hashable, Hashable] = {}
    leaves_of: dict[Hashable, list[Hashable]] = {}
    for key, users in dependents.items():
        if len(users) != 1 or key in requested or key in needed.outside_keys or not is_task(values[key]):
            continue
        user = users[0]
        if not is_task(values[user]):
            continue  # an alias or a literal
        if not dependencies_of[key]:
            leaves_of.setdefault(user, []).append(key)
        elif len(set(dependencies_of[user])) == 1:
            absorbed_into[key] = user
    if sum(len(leaves) for leaves in leaves_of.values()) >= LEAF_FUSION_MIN_LEAVES:
        for user, leaves in leaves_of.items():
            if len(leaves) <= LEAF_FUSION_MAX_PER_DEPENDENT:
                for leaf in leaves:
                    absorbed_into[leaf] = user
    else:  # a leaf that is the only dependency of its dependent is a chain link
        for user, leaves in leaves_of.items():
            if len(set(dependencies_of[user])) == 1:
                absorbed_into[leaves[0]] = user
    if not absorbed_into:
        return {}

    absorbed_by: dict[Hashable, list[Hashable]] = {}
    for key, user in absorbed_into.items():
        absorbed_by.setdefault(user, []).append(key)
    groups: dict[Hashable, list[Hashable]] = {}
    for head in absorbed_by:
        if head in absorbed_into:
            continue  # inside a larger group, which its own head collects
        # Everything absorbed, transitively, into `head`: a tree, since each member has one dependent.
        members: list[Hashable] = []
        stack = [head]
        while stack:
            key = stack.pop()
            members.append(key)
            stack.extend(absorbed_by.get(key, ()))
        looping = next((key for key in members[1:] if head in dependencies_of[key]), None)
        if looping is not None:
            # A loop whose other members all run inside the head: plan_graph would not see it any more.
            cycle = [head, looping]
            while cycle[-1] != head:
                cycle.append(absorbed_into[cycle[-1]])
            raise GraphCycleError(f"the graph has a cycle through {head!r}", cycle)
        members.reverse()  # dependencies first
        groups[head] = members
    return groups


def _fused(needed: _Needed, members: list[Hashable]) -> tuple:
    """One task computing the head (the last member) and, inside it, the other members."""
    if all(key in needed.plain for key in members):
        nested = _nested(needed, members[-1], set(members), 0)
        if nested is not None:
            return nested
    return _node_call([needed.node(key) for key in members])


def _nested(needed: _Needed, key: Hashable, members: set[Hashable], depth: int) -> tuple | None:
    """A plain task with the members it takes written in place as nested tasks, or None if that cannot be."""
    if depth > MAX_NESTING:
        return None
    task = needed.values[key]
    arguments = list(task[1:])
    # Counted by hash among the members only: `==` against every argument would also compare keys with
    # literals such as numpy arrays or pandas objects, whose `==` is element-wise or raises.
    member_uses = collections.Counter(
        argument for argument in arguments if type(argument) in _KEY_TYPES and argument in members
    )
    for position, argument in enumerate(arguments):
        if type(argument) in _KEY_TYPES and argument in members and argument != key:
            if member_uses[argument] > 1:
                return None  # in place twice would compute it twice
            inner = _nested(needed, argument, members, depth + 1)
            if inner is None:
                return None
            arguments[position] = inner
    return (task[0], *arguments)
