"""How a client object the scheduler lost with its store is put again (resendObjects, PROTOCOL.md §18).

The client keeps, per object it stored, one of these bound to what it sent (sent_objects.py). They run on
the I/O thread when the scheduler asks, and store the object again in the home store, or send it inline
when there is no store (within the scheduler's limits).
"""

from __future__ import annotations

from typing import Any

from scaler.client.payload_limits import PayloadLimits
from scaler.protocol import messages as m
from scaler.protocol import stored_payload
from scaler.protocol.serializer import DefaultSerializer, Serializer
from scaler.store.peer_stores import Stores


def put_payload_again(
    stores: Stores, limits: PayloadLimits, serializer: Serializer | None, sent: m.ObjectPayload
) -> m.ObjectPayload:
    """A lost object this client had serialized: into the home store again, or inline when there is none."""
    if stores.home:
        return stores.put_payload(sent, serializer)
    limits.check_payload(sent.payload, f"lost object {sent.object_id.hex()}")
    return sent


def put_value_again(
    stores: Stores, limits: PayloadLimits, serializer: Serializer | None, stored: m.ObjectPayload, value: Any
) -> m.ObjectPayload:
    """A lost object this client had stored from its value: stored again, or inline when there is no store."""
    if stores.home:
        return stores.put_prepared(stored.object_id, stored_payload.prepare(value, serializer), stored.name)
    payload = (serializer or DefaultSerializer()).serialize(value)
    limits.check_payload(payload, f"lost object {stored.object_id.hex()}")
    return m.ObjectPayload(object_id=stored.object_id, payload=payload, name=stored.name)
