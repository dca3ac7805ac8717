"""The objects a writer lends its store instead of copying them into segments (borrowed_memory.py).

A lent object's `bytes` (the pickle stream and each out-of-band buffer) stay referenced here, so alive and
unchanged, until the writer lets the object go (it deleted the object: its tasks are done). Only payloads
made entirely of `bytes` objects are lent: a `bytes` cannot change, whereas the user may change a NumPy
array or a bytearray after submitting it, and the task must see it as it was at the submit.

Each loan has a cookie of its own, random, in memory of its own; letting go clears the cookie first,
then drops the references, so a reader that finds the cookie intact after reading read valid bytes.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import cast

from scaler.protocol import data_messages as d
from scaler.protocol.stored_payload import PreparedPayload
from scaler.store.borrowed_memory import COOKIE_BYTES, address_of


class _Loan:
    __slots__ = ("payload", "cookie", "_cookie_view")

    def __init__(self, payload: PreparedPayload) -> None:
        self.payload = payload
        self.cookie = bytearray(os.urandom(COOKIE_BYTES))
        self._cookie_view = (ctypes.c_char * COOKIE_BYTES).from_buffer(self.cookie)

    @property
    def cookie_address(self) -> int:
        return ctypes.addressof(self._cookie_view)

    def clear(self) -> None:
        ctypes.memset(self._cookie_view, 0, COOKIE_BYTES)


class LentObjects:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loans: dict[bytes, _Loan] = {}

    def __len__(self) -> int:
        return len(self._loans)

    @staticmethod
    def lendable(payload: PreparedPayload) -> bool:
        """Whether the payload is made of whole `bytes` only (and few enough of them for one read)."""
        return (
            type(payload.main) is bytes
            and len(payload.buffers) < d.MAX_LOAN_RANGES
            and all(type(buffer.obj) is bytes and buffer.nbytes == len(buffer.obj) for buffer in payload.buffers)
        )

    def lend(self, object_id: bytes, payload: PreparedPayload, pid: int) -> d.MemoryLoan:
        """Keep the payload for `object_id` until let go of; where a reader finds it."""
        loan = _Loan(payload)
        ranges = [(address_of(payload.main), len(payload.main))]
        ranges += [(address_of(cast(bytes, buffer.obj)), buffer.nbytes) for buffer in payload.buffers]
        with self._lock:
            previous = self._loans.pop(object_id, None)
            self._loans[object_id] = loan
        if previous is not None:
            previous.clear()
        return d.MemoryLoan(pid, payload.layout.header_bytes(), tuple(ranges), loan.cookie_address, bytes(loan.cookie))

    def let_go(self, object_ids: list[bytes]) -> None:
        """These objects are deleted (ids of objects not lent are passed over): readers can no longer read them."""
        if not self._loans:
            return
        with self._lock:
            loans = [self._loans.pop(object_id) for object_id in object_ids if object_id in self._loans]
        for loan in loans:
            loan.clear()

    def let_go_all(self) -> None:
        with self._lock:
            loans, self._loans = list(self._loans.values()), {}
        for loan in loans:
            loan.clear()
