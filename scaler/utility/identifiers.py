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


# The object id under which the scheduler keeps the small result of a task submitted with keepResults
# (PROTOCOL.md §7, "Kept results"): derived from the task id, so client and scheduler both know it.
KEPT_RESULT_PREFIX = b"scaler.k"


def kept_result_id(task_id: int) -> bytes:
    return KEPT_RESULT_PREFIX + task_id.to_bytes(8, "big")


def task_of_kept_result_id(object_id: bytes) -> int | None:
    """The task id a kept-result id was derived from; None for any other object id."""
    if len(object_id) == OBJECT_ID_BYTES and object_id[:8] == KEPT_RESULT_PREFIX:
        return int.from_bytes(object_id[8:], "big")
    return None
