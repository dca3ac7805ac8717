"""ObjectReference: a handle on an object sent once to the cluster with `Client.send_object`."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ObjectReference:
    """Pass it as an argument of a task and the worker passes the object itself.

    The object crosses the network once per worker and is cached there (one deserialized copy per
    worker, shared by the tasks that use it), until the client clears, disconnects or goes away.
    """

    name: str
    object_id: bytes
    size: int

    def __repr__(self) -> str:
        return f"ObjectReference(name={self.name!r}, id={self.object_id.hex()}, size={self.size})"
