"""Where a processor puts the result of a task: inline on the control path, or in this worker's store.

A result under the store's inline limit travels inline in TaskResults, as it always did. A larger one
(of any type, its buffers out-of-band) is reported as a stored object of this worker's store; its value
stays in the processor for the dependents placed here, and its bytes are written into the store only when
another process is to read it (own_results.py). When the store fails, results go inline from then on
(those reported already are made again when their readers report them lost).

A result of persisted data (its group has keepInStores: `persist_graph`, dask's persist) goes to the store
whatever its size: it stays on the cluster for later tasks, and its client reads it only if it asks
(`result()`), so that the client never holds a persisted collection's chunks. Scalars (NEVER_LARGE_TYPES: a
payload no larger than the ids of the message that carries it) still ride inline. Every other result,
`submit(..., keep=True)`'s too, keeps the inline fast path: a store's write and read per small result would
double the round trip of `submit(f, x).result()` and make a gather of many small results several times slower.
"""

from __future__ import annotations

import logging
from typing import Any

from scaler.protocol import messages as m
from scaler.protocol import stored_payload
from scaler.protocol.serializer import Serializer
from scaler.store.peer_stores import Stores
from scaler.store.store_client import StoreError
from scaler.utility.identifiers import random_object_id
from scaler.worker.own_results import OwnResults

logger = logging.getLogger(__name__)


class LargeResults:
    def __init__(self, stores: Stores) -> None:
        self._stores = stores
        self.own = OwnResults()
        self._store_failed = False

    def place(self, task_id: int, result: Any, serializer: Serializer, kept: bool = False) -> m.Buffer | m.StoredResult:
        """The payload to send inline, or the report of the result as stored (always, when `kept` in stores, but
        for a scalar, and the store works). Raises if it cannot be serialized at all."""
        stores = self._stores
        if self._store_failed or not stores.home or type(result) in stored_payload.NEVER_LARGE_TYPES:
            return serializer.serialize(result)
        try:
            sized = stored_payload.prepare_if_large(result, serializer, 0 if kept else stores.inline_limit)
        except Exception:  # not picklable with out-of-band buffers: the serializer's own way says why
            return serializer.serialize(result)
        if not isinstance(sized, stored_payload.PreparedPayload):
            return sized
        object_id = random_object_id()
        self._write(self.own.add(object_id, result, sized))
        return m.StoredResult(task_id=task_id, object_id=object_id, size=sized.size, holder=stores.home)

    def publish(self, object_ids: list[bytes]) -> None:
        """Another process is to read these: into the store with those not written yet."""
        self._write(self.own.to_write(object_ids))

    def publish_all(self) -> None:
        """Before the queue goes to another processor: whoever reads them now needs the store."""
        self._write(self.own.all_to_write())

    def forget(self, object_ids: list[bytes]) -> None:
        """Freed by the scheduler: neither kept nor written."""
        self.own.forget(object_ids)

    def _write(self, results: list[tuple[bytes, stored_payload.PreparedPayload]]) -> None:
        for object_id, payload in results:
            try:
                self._stores.put_prepared(object_id, payload, "result", wait=False)
            except Exception as error:  # its readers report it lost, and the scheduler makes it again
                if not self._store_failed:
                    self._store_failed = True
                    reason = error if isinstance(error, StoreError) else repr(error)
                    logger.warning(f"processor: the worker's store failed, large results go through the scheduler: "
                                   f"{reason}")
