"""Large arguments of one submit, map or graph go into the home store, one per place they appear.

An argument (of any type) whose serialized size reaches the inline limit is serialized once, its buffers
out-of-band, straight into a segment of the home store (one copy: a NumPy array's bytes go from its own
memory into the segment, and the task maps them from there), and travels in the submission as an object
id. Arguments are not shared across calls here (the user may change an array between two submits):
every call stores its own, and `stored_ids` lists them for the caller to delete once its tasks are done.
Without a home store, or when it fails, the argument travels on the control path as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from scaler.client.payload_limits import PayloadLimits
from scaler.protocol import messages as m
from scaler.protocol import stored_payload
from scaler.protocol.messages import SHARED_ARGUMENT_NAME
from scaler.protocol.serializer import Serializer
from scaler.store.peer_stores import Stores
from scaler.utility.identifiers import random_object_id

if TYPE_CHECKING:
    from scaler.client.connection import ClientConnection

class StoredArguments:
    def __init__(
        self, stores: Stores, serializer: Serializer,
        store_or_none: Callable[[Callable[[], m.ObjectPayload]], m.ObjectPayload | None],
        send_object: Callable[[m.ObjectPayload], None], limits: PayloadLimits,
    ) -> None:
        self._stores = stores
        self._limits = limits
        self._serializer = serializer
        self._store_or_none = store_or_none
        self._send_object = send_object
        self._limit = stores.inline_limit
        self.stored_ids: list[bytes] = []

    def stand_in(self, argument: Any) -> tuple[bytes, bool]:
        """What travels for `argument`: its payload, or the id of the stored object it became (then True)."""
        sized = stored_payload.prepare_if_large(argument, self._serializer, self._limit)
        if not isinstance(sized, stored_payload.PreparedPayload):
            return sized, False
        prepared = sized
        # Before anything reads the argument's bytes: preparing only measured them.
        self._limits.check_size(prepared.size, "an argument")
        object_id = random_object_id()
        # Not waiting for the seal's answer: a task that asks first waits in the store for the seal.
        stored = self._store_or_none(
            lambda: self._stores.put_prepared(object_id, prepared, SHARED_ARGUMENT_NAME, wait=False)
        )
        if stored is None:
            return self._serializer.serialize(argument), False
        self._send_object(stored)  # queued before the task that names it
        self.stored_ids.append(object_id)
        return object_id, True


def stored_arguments_of(connection: ClientConnection, serializer: Serializer) -> StoredArguments | None:
    """The policy for one call; None without a home store (nothing to ask per argument then)."""
    stores = connection.stores
    if not stores.home:
        return None
    return StoredArguments(stores, serializer, connection.store_or_none, connection.send_object, connection.limits)
