"""The objects a processor was sent, and the values of object arguments: inline, kept here, or in a store.

The agent forwards every `objects` entry of the scheduler's submissions (PROTOCOL.md §8): an inline
payload (functions, serializers, small objects), or a stored object named by its holder and size (§13).
An object argument's value is made once and shared by the tasks that use it: taken from the processor
that made it (own_results.py), read from a store (mapped, not copied, on this host), or deserialized.
"""

from __future__ import annotations

from typing import Any

from scaler.protocol import messages as m
from scaler.protocol.messages import SHARED_ARGUMENT_NAME
from scaler.protocol.serializer import Serializer, loads
from scaler.store.peer_stores import Stores
from scaler.store.store_client import ObjectMissing, StoreTimeout
from scaler.worker.large_results import LargeResults
from scaler.worker.own_results import ABSENT

# How long reading a stored input may take before its holder counts as gone (objectsLost, task given back):
# a base for any object (WorkerConfig.input_wait_seconds), plus its size at a pace far below any working link,
# so that a slow but living holder is not declared lost (that would only cost a rerun, but a needless one).
INPUT_WAIT_BYTES_PER_SECOND = 20e6


class InputLost(Exception):
    """A stored input of the task could not be read from its holders."""

    def __init__(self, object_id: bytes, reason: str) -> None:
        super().__init__(reason)
        self.object_id = object_id
        self.reason = reason


class TaskObjects:
    def __init__(self, stores: Stores, results: LargeResults, input_wait_seconds: float) -> None:
        self._stores = stores
        self._input_wait_seconds = input_wait_seconds
        self._results = results
        self.payloads: dict[bytes, m.Buffer] = {}
        self.names: dict[bytes, str] = {}
        # Stored objects by id: the store holding each and its size; read through this worker's store.
        self._stored_holders: dict[bytes, tuple[str, int]] = {}
        # Stored inputs reported lost: the tasks queued behind that need one go back at once, until the scheduler
        # names the object again (a client sent it again) or deletes it (a result made again has a new id).
        self._lost: set[bytes] = set()
        # Whether the scheduler has named the stores yet: until then a holder missing from the directory says nothing.
        self.directory_known = False
        self._values: dict[bytes, Any] = {}

    def accept(self, items: list[m.ObjectPayload]) -> None:
        for item in items:
            if item.holder:
                self._stored_holders[item.object_id] = (item.holder, item.size)
            else:
                self.payloads[item.object_id] = item.payload
                # A lost object sent again by a client with no store comes inline.
                self._stored_holders.pop(item.object_id, None)
            self._lost.discard(item.object_id)
            self.names[item.object_id] = item.name

    def forget(self, object_ids: list[bytes]) -> None:
        for object_id in object_ids:
            self.payloads.pop(object_id, None)
            self._stored_holders.pop(object_id, None)
            self._lost.discard(object_id)
            self.names.pop(object_id, None)
            self._values.pop(object_id, None)

    def argument_values(self, object_ids: list[bytes]) -> set[bytes]:
        """Of these objects, the stored call arguments whose values are kept here (a user's send_object is not
        one: its value stays for the tasks to come, until it is deleted)."""
        return {
            object_id for object_id in object_ids
            if object_id in self._values and object_id in self._stored_holders
            and self.names.get(object_id) == SHARED_ARGUMENT_NAME
        }

    def drop_values(self, object_ids: set[bytes]) -> None:
        """Let these values go (read from the store again, should a later task need one)."""
        for object_id in object_ids:
            self._values.pop(object_id, None)

    def report_lost(self, object_id: bytes) -> bool:
        """Whether this is the first report of the object lost (the scheduler is told once)."""
        if object_id in self._lost:
            return False
        self._lost.add(object_id)
        return True

    def value(self, object_id: bytes, serializer: Serializer) -> Any:
        """The value of an object argument; InputLost if its holders do not give it."""
        if object_id not in self._values:
            stored = self._stored_holders.get(object_id)
            own = self._results.own.take(object_id)
            if own is not ABSENT:
                value = own
            elif stored is not None:
                # Made here perhaps, but its value no longer kept (own_results.py has a budget): the store must
                # have it before we read it there.
                self._results.publish([object_id])
                value = self._read(object_id, *stored, serializer)
            else:
                value = loads(serializer, self.payloads[object_id])
            self._values[object_id] = value
        return self._values[object_id]

    def _read(self, object_id: bytes, holder: str, size: int, serializer: Serializer) -> Any:
        if object_id in self._lost:
            raise InputLost(object_id, "reported lost already")
        if self.directory_known and self._stores.address_of(holder) is None:
            # The scheduler dropped its store after sending the task: waiting for the holder would only end in
            # the same report, an input wait later.
            raise InputLost(object_id, f"{holder}: its store has left the cluster")
        wait = self._input_wait_seconds + size / INPUT_WAIT_BYTES_PER_SECOND
        try:
            # Through this worker's store, which pulls it from the holder if need be; mapped, not copied.
            return self._stores.read(object_id, holder, serializer, wait)
        except (ObjectMissing, StoreTimeout) as error:  # a refusal or garbage is the task's failure
            raise InputLost(object_id, f"{holder}: {error}") from error
