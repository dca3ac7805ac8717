"""Turning what dask hands a scheduler into a graph that `Client.get` computes.

dask gives a scheduler's `get` an expression (with `__dask_graph__()`), a `HighLevelGraph`, or a dict
whose values are task-spec nodes (`dask._task_spec`: Task, Alias, DataNode, nested List/Tuple/Dict/Set
containers, keyword arguments) or legacy tuples. dask's own `convert_legacy_graph` first brings all of
them to task-spec nodes, so dask's semantics stay dask's; then each node becomes what `plan_graph` reads:

- a plain Task whose arguments are references or literals `plan_graph` cannot mistake for keys or
  tasks: `(func, *args)`, references replaced by keys. The common case costs no wrapper on the worker.
- an Alias: its target key, which `plan_graph` follows.
- a DataNode: its value (behind a one-line task when `plan_graph` would read the value as a key or a task).
- anything else (keyword arguments, nested tasks and containers, fused subgraphs, subclasses):
  `(run_nodes, NodeCall(...), *dependency keys)`: the worker calls the node with `{key: value}` of its
  dependencies, exactly as dask's own schedulers do.

Small tasks do not pay for distribution twice: a task whose only dependent is the next link of a chain,
and tasks without dependencies whose only dependent takes few of them, run inside that dependent (see
`_fusion_groups`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any

from dask._task_spec import Alias, DataNode, GraphNode, Task, TaskRef, convert_legacy_graph
from dask.utils import ensure_dict

from scaler.client.graph import GraphError, GraphKeyError, is_task

# Tasks without dependencies are folded into their only dependent when the graph has at least this
# many of them (a few expensive loads keep their parallelism), and at most this many per dependent.
LEAF_FUSION_MIN_LEAVES = 256
LEAF_FUSION_MAX_PER_DEPENDENT = 4


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
    node_count: int  # task-spec nodes needed by the requested keys
    task_count: int  # tasks the scaler graph runs for them


def task_spec_graph(dsk: Any) -> dict[Hashable, GraphNode]:
    """Whatever dask passes as `dsk`, as a dict of key -> task-spec node."""
    if not isinstance(dsk, Mapping):
        graph_of = getattr(dsk, "__dask_graph__", None)
        if graph_of is None:
            raise TypeError(f"expected a dask graph (a mapping) or a dask collection, got {type(dsk).__name__}")
        dsk = graph_of()
    return convert_legacy_graph(ensure_dict(dsk))


def translate(dsk: Any, keys: list[Hashable], fuse: bool = True) -> Translation:
    """Translate the part of a dask graph that `keys` need; raises before anything runs if it cannot run."""
    nodes = task_spec_graph(dsk)
    requested: list[Hashable] = []
    seen_requested: set[Hashable] = set()
    for key in keys:
        if key not in nodes:
            raise GraphKeyError(key)
        if key not in seen_requested:
            seen_requested.add(key)
            requested.append(key)
    needed = _cull(nodes, requested)
    groups = _fusion_groups(needed, seen_requested) if fuse else {}
    graph: dict[Hashable, Any] = {}
    for key, node in needed.items():
        if key in groups:
            group = groups[key]
            if group is None:
                continue  # runs inside its dependent
            graph[key] = _node_call(group)
        else:
            graph[key] = _translate_node(node, needed)
    task_count = sum(1 for value in graph.values() if is_task(value))
    return Translation(graph=graph, requested=requested, node_count=len(needed), task_count=task_count)


def _cull(nodes: dict[Hashable, GraphNode], keys: list[Hashable]) -> dict[Hashable, GraphNode]:
    """The nodes `keys` need; a dependency missing from the graph is an error, as in dask's schedulers."""
    needed: dict[Hashable, GraphNode] = {}
    stack = list(keys)
    while stack:
        key = stack.pop()
        if key in needed:
            continue
        node = nodes[key]
        needed[key] = node
        for dependency in node.dependencies:
            if dependency not in nodes:
                raise GraphError(f"{key!r} depends on {dependency!r}, which is not in the graph")
            if dependency not in needed:
                stack.append(dependency)
    return needed


def _translate_node(node: GraphNode, graph: Mapping) -> Any:
    kind = type(node)
    if kind is Alias:
        return node.target  # type: ignore[attr-defined]
    if kind is DataNode:
        value = node.value  # type: ignore[attr-defined]
        if is_task(value) or _is_key(value, graph):
            return (literal_value, Literal(value))
        return value
    if kind is Task and not node.kwargs:  # type: ignore[attr-defined]
        arguments = _plain_arguments(node.args, graph)  # type: ignore[attr-defined]
        if arguments is not None:
            return (node.func, *arguments)  # type: ignore[attr-defined]
    return _node_call([node])


def _plain_arguments(arguments: tuple, graph: Mapping) -> list[Any] | None:
    """Arguments for a plain `(func, *args)` task, or None if one needs the task-spec machinery."""
    plain = []
    for argument in arguments:
        kind = type(argument)
        if kind is TaskRef or kind is Alias:
            plain.append(argument.key if kind is TaskRef else argument.target)
        elif kind is list or kind is tuple or isinstance(argument, (GraphNode, TaskRef)):
            return None  # containers may hold references; plan_graph would also look inside them
        elif _is_key(argument, graph):
            return None  # a literal that plan_graph would read as a reference
        else:
            plain.append(argument)
    return plain


def _is_key(value: Any, graph: Mapping) -> bool:
    try:
        return value in graph
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


def _fusion_groups(
    graph: dict[Hashable, GraphNode], requested: set[Hashable]
) -> dict[Hashable, list[GraphNode] | None]:
    """Which tasks run inside their only dependent: key -> nodes to run in order, or None if absorbed.

    Two kinds are absorbed, neither wanted by anyone else nor requested:
    - a link of a linear chain (its dependent has no other dependency): never loses parallelism;
    - a task without dependencies, when the graph has many of them (`LEAF_FUSION_MIN_LEAVES`) and its
      dependent takes few (`LEAF_FUSION_MAX_PER_DEPENDENT`): tiny leaves such as the inputs of a tree
      reduction stop costing a round trip each, while a handful of expensive loads keep their parallelism.
    """
    dependents: dict[Hashable, list[Hashable]] = {}
    for key, node in graph.items():
        for dependency in node.dependencies:
            dependents.setdefault(dependency, []).append(key)

    def fusible(node: GraphNode) -> bool:
        return type(node) is not Alias and type(node) is not DataNode

    def sole_dependent(key: Hashable) -> Hashable | None:
        users = dependents.get(key)
        if users is None or len(users) != 1 or key in requested:
            return None
        user = users[0]
        return user if fusible(graph[user]) else None

    absorbed_into: dict[Hashable, Hashable] = {}
    leaves_of: dict[Hashable, list[Hashable]] = {}
    for key, node in graph.items():
        if not fusible(node):
            continue
        user = sole_dependent(key)
        if user is None:
            continue
        if not node.dependencies:
            leaves_of.setdefault(user, []).append(key)
        elif len(graph[user].dependencies) == 1:
            absorbed_into[key] = user
    if sum(len(leaves) for leaves in leaves_of.values()) >= LEAF_FUSION_MIN_LEAVES:
        for user, leaves in leaves_of.items():
            if len(leaves) <= LEAF_FUSION_MAX_PER_DEPENDENT:
                for leaf in leaves:
                    absorbed_into[leaf] = user
    else:  # a leaf that is also the only dependency of its dependent is a chain link
        for user, leaves in leaves_of.items():
            if len(graph[user].dependencies) == 1:
                absorbed_into[leaves[0]] = user
    if not absorbed_into:
        return {}

    groups: dict[Hashable, list[GraphNode] | None] = {key: None for key in absorbed_into}
    absorbed_by: dict[Hashable, list[Hashable]] = {}
    for key, user in absorbed_into.items():
        absorbed_by.setdefault(user, []).append(key)
    for head in absorbed_by:
        if head in absorbed_into:
            continue  # inside a larger group: its own head collects it
        # Everything absorbed, transitively, into `head`; dependencies first (reverse of a walk from the head).
        members: list[Hashable] = []
        stack = [head]
        while stack:
            key = stack.pop()
            members.append(key)
            stack.extend(absorbed_by.get(key, ()))
        if any(head in graph[key].dependencies for key in members[1:]):
            # A loop whose other members all run inside the head: plan_graph would not see it any more.
            raise GraphError(f"the graph has a cycle through {head!r}")
        groups[head] = [graph[key] for key in reversed(members)]
    return groups
