"""Ids that cross the wire: task ids are 64-bit, object ids are 16 bytes."""

from __future__ import annotations

import hashlib
import os

OBJECT_ID_BYTES = 16
TASK_COUNTER_BITS = 32


def content_object_id(payload: bytes) -> bytes:
    """Functions are named by their bytes, so the same function is stored and shipped once."""
    return hashlib.blake2b(payload, digest_size=OBJECT_ID_BYTES).digest()


def random_object_id() -> bytes:
    return os.urandom(OBJECT_ID_BYTES)
