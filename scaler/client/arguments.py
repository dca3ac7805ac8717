"""Task arguments into payloads, for submit, map and graphs alike; and the errors that name the culprit.

An ObjectReference travels as its object id. So does an argument that the call's sharing policy
(scaler/client/shared_arguments.py) stands in for by an object sent once, and one that is large once
serialized, put into the home store (scaler/client/stored_arguments.py). A ScalerFuture of a task
submitted with keep=True travels as a reference to its task (TaskGroup.refTaskIds), which the scheduler
resolves on the cluster, so its value never passes through the client. Everything else is serialized,
argument by argument, on the caller's thread.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol

from scaler.client.future import ScalerFuture
from scaler.client.graph import TemplateCall
from scaler.client.object_reference import ObjectReference
from scaler.client.stored_arguments import StoredArguments
from scaler.errors import ScalerError, SerializationError
from scaler.protocol.stored_payload import NEVER_LARGE_TYPES


class ArgumentSharing(Protocol):
    def shares(self, argument: Any) -> bool:
        """Whether `argument` travels as a payload or object made once for several tasks."""

    def stand_in(self, argument: Any, serialize: Callable[[Any], bytes]) -> tuple[bytes, bool]:
        """What travels for a shared argument: a payload, or an object id (then True)."""


class Unserializable(Exception):
    """The argument at `position` could not be serialized (the original error is the cause); the caller,
    which knows whose arguments they are, raises the SerializationError the user sees."""

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position


def serialize_arguments(
    arguments: Iterable[Any], serialize: Callable[[Any], bytes], sharing: ArgumentSharing | None,
    payloads: list, object_positions: list[int], storing: StoredArguments | None = None,
    references: list[tuple[int, int]] | None = None, connection: object = None,
) -> None:
    """Append what travels for each argument to `payloads`, and the place in `payloads` of each object id
    to `object_positions`. With `storing`, an argument that is large once serialized goes into the home
    store and travels as an object id. A kept future of `connection` leaves an empty payload and its place
    and task id in `references`. Raises Unserializable with the argument's index in `arguments`, and
    ValueError for a future that cannot be an argument."""
    first = len(payloads)  # one payload an argument: the failing argument's index is what was added before it
    try:
        for argument in arguments:
            if type(argument) is ObjectReference:
                object_positions.append(len(payloads))
                payloads.append(argument.object_id)
            elif isinstance(argument, ScalerFuture):
                task_id = kept_task_of(argument, connection, references is not None)
                references.append((len(payloads), task_id))  # type: ignore[union-attr]  # checked just above
                payloads.append(b"")
            elif sharing is not None and sharing.shares(argument):
                payload, is_object_id = sharing.stand_in(argument, serialize)
                if is_object_id:
                    object_positions.append(len(payloads))
                payloads.append(payload)
            elif storing is not None and type(argument) not in NEVER_LARGE_TYPES:
                payload, is_object_id = storing.stand_in(argument)
                if is_object_id:
                    object_positions.append(len(payloads))
                payloads.append(payload)
            else:
                payloads.append(serialize(argument))
    except (ScalerError, FutureArgumentError):  # a shared argument too large to send, a bad future: as they are
        raise
    except Exception as error:
        raise Unserializable(len(payloads) - first) from error


class FutureArgumentError(ValueError):
    """A future passed as an argument that cannot be resolved on the cluster."""


def kept_task_of(future: ScalerFuture, connection: object, references_taken: bool = True) -> int:
    """The task id a future passed as an argument stands for; FutureArgumentError (a ValueError) if the
    future's result is not kept on the cluster for this client."""
    if not references_taken:
        raise FutureArgumentError("a future can be an argument only of submit(), map() and get()")
    if not future.keeps_result:
        raise FutureArgumentError(
            f"the future of task {future.task_id:#x} was not submitted with keep=True: its result is not kept on "
            "the cluster, so it cannot be another task's argument; submit it with keep=True, or pass its result()"
        )
    if future.released:
        raise FutureArgumentError(f"the future of task {future.task_id:#x} was released: its result is gone")
    if future._connection is not connection:
        raise FutureArgumentError(
            f"the future of task {future.task_id:#x} belongs to another client: a task can use only the kept "
            "results of its own client"
        )
    return future.task_id


def serialization_error(what: str, error: BaseException | None) -> SerializationError:
    reason = f"{type(error).__name__}: {error}" if error is not None else "unknown error"
    return SerializationError(f"cannot serialize {what}: {reason}")


def function_name(fn: Callable[..., Any]) -> str:
    if isinstance(fn, TemplateCall):
        return fn.name
    return getattr(fn, "__qualname__", None) or type(fn).__name__
