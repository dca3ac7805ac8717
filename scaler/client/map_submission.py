"""The tasks of a `Client.map` into TaskGroups, in chunks, so the scheduler starts dispatching early.

A chunk holds up to `MAP_CHUNK` argument tuples of one width (a new width starts a new group), checked
against the function's signature once per chunk and serialized tuple by tuple on the caller's thread.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from scaler.client.arguments import Unserializable, function_name, serialization_error, serialize_arguments
from scaler.client.call_check import CallShape
from scaler.client.call_sites import CallSites
from scaler.client.connection import ClientConnection
from scaler.client.future import ScalerFuture
from scaler.client.result_sinks import MapCollector
from scaler.client.shared_arguments import RepeatedArguments
from scaler.client.stored_arguments import StoredArguments
from scaler.utility.blocking import client_nesting_depth
from scaler.utility.tags import Tags
from scaler.utility.wording import with_article

# Tasks of a map go out in chunks this size, so the scheduler starts dispatching before the map is built.
MAP_CHUNK = 1000


def submit_map(
    connection: ClientConnection, call_sites: CallSites, serialize: Callable[[Any], bytes], profiling: bool,
    fn: Callable[..., Any], shape: CallShape | None, function_id: bytes, argument_tuples: list[tuple],
    collector: MapCollector, repeated: RepeatedArguments, tags: Tags, priority: int,
    storing: StoredArguments | None,
) -> None:
    """Queue the tasks of a map in chunks; a chunk ends early where the number of arguments changes.

    Raises TypeError (a tuple `fn` cannot take, or not a tuple) and SerializationError naming the tuple."""
    depth = client_nesting_depth()
    task_ids = collector.task_ids
    sharing = repeated if repeated else None  # most maps repeat no argument: nothing to ask per argument
    start = 0
    while start < len(argument_tuples):
        chunk_args: list[bytes] = []
        object_positions: list[int] = []
        references: list[tuple[int, int]] = []
        width = -1
        end = start
        while end < len(argument_tuples) and end - start < MAP_CHUNK:
            arguments = argument_tuples[end]
            if not isinstance(arguments, (tuple, list)):
                raise TypeError(
                    f"map() takes an iterable of argument tuples such as [(1,), (2,)]; "
                    f"item {end} is {with_article(type(arguments).__name__)}"
                )
            if width == -1:
                width = len(arguments)
                # Every tuple of a chunk has its first one's width: one check per chunk covers them all.
                if shape is not None and not shape.fits(width):
                    problem = shape.problem(arguments, {})
                    if problem is not None:
                        raise TypeError(f"map(): argument tuple {end} does not fit {problem}")
            elif len(arguments) != width:
                break  # a new group starts with the new number of arguments
            try:
                serialize_arguments(
                    arguments, serialize, sharing, chunk_args, object_positions, storing, references, connection
                )
            except Unserializable as failure:
                raise serialization_error(
                    f"argument {failure.position} of argument tuple {end} of map({function_name(fn)})",
                    failure.__cause__,
                ) from failure.__cause__
            end += 1
        signature = call_sites.signature(function_id, width, (), depth, profiling, tags, priority)
        connection.submit_tasks(signature, task_ids[start:end], chunk_args, collector, object_positions, references)
        start = end


def submit_kept_map(submit_one: Callable[..., ScalerFuture], iterable: Iterable[Any]) -> list[ScalerFuture]:
    """map(keep=True): a kept future per argument tuple (consecutive submits travel as one group anyway)."""
    futures = []
    for index, arguments in enumerate(iterable):
        if not isinstance(arguments, (tuple, list)):
            raise TypeError(
                f"map() takes an iterable of argument tuples such as [(1,), (2,)]; item {index} is "
                f"{with_article(type(arguments).__name__)}"
            )
        futures.append(submit_one(*arguments))
    return futures
