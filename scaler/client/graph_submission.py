"""A planned graph (scaler/client/graph.py) into one TaskSubmission, with a future for every wanted task.

Consecutive calls of one signature share a TaskGroup; an argument that is another task's result is an
empty slot the worker fills (`ref_arg_indices`, `ref_task_ids`); the tasks nobody asked for are quiet:
the scheduler sends their results only to the tasks that need them. A key whose value is a kept future is
a reference to that future's task, resolved by the scheduler; with `keep`, the wanted tasks' results stay on
the cluster (persist).
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, Hashable, Mapping

from scaler.client.arguments import Unserializable, kept_task_of, serialization_error, serialize_arguments
from scaler.client.call_sites import CallSites
from scaler.client.connection import ClientConnection
from scaler.client.future import ScalerFuture, call_when_all_done
from scaler.client.graph import GraphPlan, PlannedCall, TemplateCall
from scaler.client.shared_arguments import RepeatedArguments
from scaler.client.stored_arguments import StoredArguments, stored_arguments_of
from scaler.errors import SerializationError
from scaler.protocol import messages as m
from scaler.protocol.serializer import Serializer
from scaler.protocol.task_signature import TaskSignature
from scaler.utility.blocking import client_nesting_depth
from scaler.utility.tags import NO_TAGS, Tags


def submit_graph(
    calls: list[PlannedCall], wanted: set[Hashable], call_sites: CallSites, connection: ClientConnection,
    serializer: Serializer, profiling: bool, tags: Tags = NO_TAGS, priority: int = 0,
    key_priorities: Mapping[Hashable, int] | None = None, kept_inputs: Mapping[Hashable, ScalerFuture] | None = None,
    keep: bool = False,
) -> dict[Hashable, ScalerFuture]:
    """Queue the planned calls as one submission; returns a future per wanted task key.

    `kept_inputs` are the keys whose values are kept futures (GraphPlan.futures): references to their tasks.
    With `keep`, the wanted tasks are submitted with keep=True (Client.persist_graph).

    Every task has `priority`, but those whose key is in `key_priorities`, which have theirs.

    An argument object found in several calls is serialized once, and sent once if large, as a hidden
    object deleted when every wanted task is done (and so every task that needed it, unless one failed
    first: the scheduler then keeps the objects still-running tasks name until clear()).
    """
    storing = stored_arguments_of(connection, serializer)
    sharing = RepeatedArguments([call.arguments for call in calls], connection.send_object, storing)
    try:
        by_key = _submit(
            calls, wanted, call_sites, connection, serializer, profiling, tags, priority, key_priorities or {},
            sharing if sharing else None, storing, kept_inputs or {}, keep,
        )
    except BaseException:
        # Refused before anything was submitted (an argument too large): the objects sent for it go too.
        hidden = sharing.hidden + (storing.stored_ids if storing is not None else [])
        if hidden and connection.is_open:
            connection.send_message(m.DeleteObjects(object_ids=hidden))
        raise
    if storing is not None and storing.stored_ids:
        sharing.hidden.extend(storing.stored_ids)
    if sharing.hidden:
        hidden = sharing.hidden

        def delete_hidden() -> None:
            if connection.is_open:
                connection.send_message(m.DeleteObjects(object_ids=hidden))

        call_when_all_done(list(by_key.values()), delete_hidden)
    return by_key


def futures_of_requested_keys(
    plan: GraphPlan, requested: list[Hashable], futures: dict[Hashable, ScalerFuture],
    keep_literal: Callable[[Any], ScalerFuture] | None,
) -> dict[Hashable, concurrent.futures.Future]:
    """A future for each requested key: its task's, a kept future the graph holds there, or one of a literal
    (done at once; with `keep_literal`, persist_graph's, the literal kept on the cluster too)."""
    outcome: dict[Hashable, concurrent.futures.Future] = {}
    for key in requested:
        if key not in plan.literals:
            outcome[key] = futures[plan.targets[key]]
            continue
        value = plan.literals[key]
        if isinstance(value, ScalerFuture) and value.keeps_result:
            outcome[key] = value  # its result() reads the kept result
        elif keep_literal is not None:
            outcome[key] = keep_literal(value)
        else:
            literal: concurrent.futures.Future = concurrent.futures.Future()
            literal.set_result(value)
            outcome[key] = literal
    return outcome


def _submit(
    calls: list[PlannedCall], wanted: set[Hashable], call_sites: CallSites, connection: ClientConnection,
    serializer: Serializer, profiling: bool, tags: Tags, priority: int, key_priorities: Mapping[Hashable, int],
    sharing: RepeatedArguments | None, storing: StoredArguments | None,
    kept_inputs: Mapping[Hashable, ScalerFuture], keep: bool,
) -> dict[Hashable, ScalerFuture]:
    serialize = serializer.serialize
    task_ids = {key: kept_task_of(future, connection) for key, future in kept_inputs.items()}
    task_ids.update((call.key, connection.next_task_id()) for call in calls)
    depth = client_nesting_depth()
    groups: list[m.TaskGroup] = []
    current_signature: TaskSignature | None = None
    group: m.TaskGroup | None = None
    quiet: list[int] = []
    futures: dict[int, ScalerFuture] = {}
    by_key: dict[Hashable, ScalerFuture] = {}
    for call in calls:
        function = call.function
        if isinstance(function, TemplateCall):
            function = call_sites.template_call(function)
            # The template holds the task's own arguments, one per parameter of the user's function.
            call_sites.check_graph_call(call.key, function.function, call.arguments[0])
        try:
            function_id = call_sites.function_id(function)
        except SerializationError as error:
            raise SerializationError(f"the task at key {call.key!r}: {error}") from error.__cause__
        task_priority = key_priorities.get(call.key, priority) if key_priorities else priority
        kept = keep and call.key in wanted
        # Persisted data: the wanted tasks' results stay in stores, small ones too, until the client asks.
        signature = call_sites.signature(
            function_id, len(call.arguments), (), depth, profiling, tags, task_priority, kept, keep_in_stores=kept
        )
        if signature is not current_signature:
            # The calls of a group share a function and a width: checking the first checks them all.
            if not isinstance(function, TemplateCall):
                call_sites.check_graph_call(call.key, function, call.arguments)
            current_signature = signature
            group = signature.new_group()
            groups.append(group)
        assert group is not None
        task_id = task_ids[call.key]
        group.task_ids.append(task_id)
        _add_arguments(group, call, task_ids, serialize, sharing, storing, function)
        if call.key in wanted:
            future = ScalerFuture(task_id, connection, serializer, kept)
            futures[task_id] = future
            by_key[call.key] = future
        else:
            quiet.append(task_id)
    connection.submit_graph(m.TaskSubmission(objects=[], groups=groups, quiet_task_ids=quiet), futures)
    return by_key


def _add_arguments(
    group: m.TaskGroup, call: PlannedCall, task_ids: dict[Hashable, int], serialize: Callable[[Any], bytes],
    sharing: RepeatedArguments | None, storing: StoredArguments | None, function: Callable[..., Any],
) -> None:
    """Append one call's arguments to its group: other tasks' results as empty slots, the rest as payloads."""
    slots = call.reference_slots
    try:
        if not slots:
            serialize_arguments(call.arguments, serialize, sharing, group.args, group.object_arg_indices, storing)
            return
        base = len(group.args)
        for position, argument in enumerate(call.arguments):
            if position in slots:
                group.ref_arg_indices.append(base + position)
                group.ref_task_ids.append(task_ids[slots[position]])
                group.args.append(b"")
                continue
            try:
                serialize_arguments((argument,), serialize, sharing, group.args, group.object_arg_indices, storing)
            except Unserializable as failure:
                raise Unserializable(position) from failure.__cause__
    except Unserializable as failure:
        cause = failure.__cause__
        # A wrapped call's single argument is its template, which holds all of the task's arguments.
        what = "an argument" if isinstance(function, TemplateCall) else f"argument {failure.position}"
        raise serialization_error(f"{what} of the task at key {call.key!r}", cause) from cause
