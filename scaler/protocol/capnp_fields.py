"""Cap'n Proto encoding of the messages made of plain fields, field by field from their dataclasses.

Most protocol messages are flat: numbers, text, a Role, lists of ids, a store directory. Each is a member
of the Message union whose fields are named as the dataclass's, in camelCase, so one table of fields per
class, made once at import, encodes and decodes them all (capnp_codec.py writes the other messages by hand).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from scaler.protocol.message_types import (
    CancelRefused,
    CancelTasks,
    ClearRequest,
    ClearResponse,
    DeleteObjects,
    Disconnect,
    DrainWorkers,
    DrainWorkersResponse,
    Heartbeat,
    HeartbeatEcho,
    Hello,
    ObjectsHeld,
    ObjectsLost,
    ProcessorState,
    ProtocolError,
    PublishObjects,
    Reannounce,
    Refused,
    ReleaseTasks,
    ResendObjects,
    Role,
    ShutdownRequest,
    ShutdownResponse,
    StoreDirectory,
    StoreEntry,
    TaskOutput,
    TaskProfile,
    TaskStarted,
    Welcome,
)

_ROLE_NAMES = {Role.CLIENT: "client", Role.WORKER: "worker", Role.STORE: "store"}
_ROLE_BY_NAME = {name: role for role, name in _ROLE_NAMES.items()}

# Messages of plain fields (numbers, text, a Role, lists of ids), each a member of the Message union
# whose fields are named as the dataclass's, in camelCase: encoded and decoded field by field.
FLAT_MESSAGES: dict[type, str] = {
    Hello: "hello",
    Welcome: "welcome",
    Refused: "refused",
    Heartbeat: "heartbeat",
    HeartbeatEcho: "heartbeatEcho",
    CancelTasks: "cancelTasks",
    ReleaseTasks: "releaseTasks",
    CancelRefused: "cancelRefused",
    TaskStarted: "taskStarted",
    DrainWorkers: "drainWorkers",
    DrainWorkersResponse: "drainWorkersResponse",
    DeleteObjects: "deleteObjects",
    ObjectsLost: "objectsLost",
    ObjectsHeld: "objectsHeld",
    Reannounce: "reannounce",
    PublishObjects: "publishObjects",
    ResendObjects: "resendObjects",
    ClearRequest: "clearRequest",
    ClearResponse: "clearResponse",
    Disconnect: "disconnect",
    ShutdownRequest: "shutdownRequest",
    ShutdownResponse: "shutdownResponse",
    ProtocolError: "protocolError",
    ProcessorState: "processorState",
    TaskOutput: "taskOutput",
}

def write_directory(struct, directory: StoreDirectory) -> None:
    entries = struct.init("stores", len(directory.stores))
    for slot, entry in zip(entries, directory.stores):
        slot.dataAddress = entry.data_address
        slot.ipcAddress = entry.ipc_address
        slot.hostKey = entry.host_key
    struct.homeStore = directory.home_store


def read_directory(reader) -> StoreDirectory:
    return StoreDirectory(
        stores=[StoreEntry(entry.dataAddress, entry.ipcAddress, entry.hostKey) for entry in reader.stores],
        home_store=reader.homeStore,
    )


# How a read field becomes the dataclass's value, by its declared type: a capnp list or Data is a view
# into the frame, which must not outlive it.
_READ_AS: dict[str, Callable[[Any], Any]] = {
    "list[int]": list,
    "list[bytes]": lambda values: [bytes(value) for value in values],
    "list[str]": lambda values: [str(value) for value in values],
    "tuple[str, ...]": tuple,
    "bytes": bytes,
    "Role": lambda name: _ROLE_BY_NAME[name],
    "StoreDirectory": read_directory,
}


def _set_role(struct, wire_name: str, role: Role) -> None:
    setattr(struct, wire_name, _ROLE_NAMES[role])


def _set_directory(struct, wire_name: str, directory: StoreDirectory) -> None:
    write_directory(struct.init(wire_name), directory)


# How a field is written, by its declared type, where a plain assignment will not do.
_WRITE_AS: dict[str, Callable[[Any, str, Any], None]] = {"Role": _set_role, "StoreDirectory": _set_directory}


def _camel_case(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.title() for word in rest)


# Per class: each field's name, its name on the wire, how it is read and how written (None: as it is).
_FLAT_FIELDS: dict[type, tuple[tuple[str, str, Callable[[Any], Any] | None, Callable | None], ...]] = {
    cls: tuple(
        (field.name, _camel_case(field.name), _READ_AS.get(str(field.type)), _WRITE_AS.get(str(field.type)))
        for field in dataclasses.fields(cls)
    )
    for cls in (*FLAT_MESSAGES, TaskProfile)
}


def write_fields(struct, value: Any) -> None:
    for name, wire_name, _, write_as in _FLAT_FIELDS[type(value)]:
        if write_as is None:
            setattr(struct, wire_name, getattr(value, name))
        else:
            write_as(struct, wire_name, getattr(value, name))


def read_fields(cls: type, reader) -> Any:
    values = {}
    for name, wire_name, read_as, _ in _FLAT_FIELDS[cls]:
        field = getattr(reader, wire_name)
        values[name] = field if read_as is None else read_as(field)
    return cls(**values)
