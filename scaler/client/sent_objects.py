"""The objects this client put into stores, kept so that it can put them again if their store is lost.

A client object lives in one store only (PROTOCOL.md §17); when that store is gone the scheduler asks
the client that owns it to send it again (resendObjects, §18). So the client keeps, for every object it
stored, a way to store it again: a reference to what it sent (the value, or its serialized payload),
never a copy, until it deletes the object (deleteObjects, clear()). What it cannot send again it
answers with objectsLost, and the tasks that need it fail with ObjectLostError naming it.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from scaler.protocol import messages as m
from scaler.store.store_client import StoreError

logger = logging.getLogger(__name__)

# Stores the object again: what names it now (stored in the home store, or inline when there is none).
PutAgain = Callable[[], m.ObjectPayload]


class SentObjects:
    def __init__(self) -> None:
        self._put_again: dict[bytes, PutAgain] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._put_again)

    def remember(self, object_id: bytes, put_again: PutAgain) -> None:
        with self._lock:
            self._put_again[object_id] = put_again

    def forget(self, object_ids: Iterable[bytes]) -> None:
        """Deleted: the scheduler will not ask for them any more."""
        with self._lock:
            for object_id in object_ids:
                self._put_again.pop(object_id, None)

    def forget_all(self) -> None:
        with self._lock:
            self._put_again.clear()

    def resend(self, object_ids: Iterable[bytes]) -> tuple[list[m.ObjectPayload], list[bytes]]:
        """The objects stored again (what names each now), and the ids of those this client cannot send."""
        sent: list[m.ObjectPayload] = []
        lost: list[bytes] = []
        for object_id in object_ids:
            with self._lock:
                put_again = self._put_again.get(object_id)
            if put_again is None:
                lost.append(object_id)
                continue
            try:
                sent.append(put_again())
            except (StoreError, OSError, ValueError) as error:
                logger.warning(f"Client: could not send lost object {object_id.hex()} again: {error}")
                lost.append(object_id)
        return sent, lost
