"""Object arguments of a processor's tasks (scaler/worker/task_objects.py), with a stand-in for the stores."""

from __future__ import annotations

from typing import Any

import numpy as np

from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer
from scaler.worker.config import DEFAULT_INPUT_WAIT_SECONDS
from scaler.worker.large_results import LargeResults
from scaler.worker.task_objects import TaskObjects

HOME = "tcp://127.0.0.1:1"


class Stores:
    """What LargeResults and TaskObjects use of peer_stores.Stores; records the writes and reads in order."""

    home = HOME
    inline_limit = 1024

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []

    def put_prepared(self, object_id: bytes, payload: Any, name: str, wait: bool = True) -> None:
        self.calls.append(("write", object_id))

    def address_of(self, data_address: str) -> object:
        return object()

    def read(self, object_id: bytes, holder: str, serializer: Any, timeout: float) -> str:
        self.calls.append(("read", object_id))
        return "from the store"


def test_a_result_made_here_whose_value_is_no_longer_kept_is_written_before_it_is_read_from_the_store() -> None:
    stores = Stores()
    results = LargeResults(stores)  # type: ignore[arg-type]
    objects = TaskObjects(stores, results, DEFAULT_INPUT_WAIT_SECONDS)  # type: ignore[arg-type]
    stored = results.place(1, np.zeros(10_000), DefaultSerializer())
    assert isinstance(stored, m.StoredResult)
    assert stores.calls == []  # kept here, unwritten
    results.own.take(stored.object_id)  # handed to a dependent earlier, and let go since (drop_values)
    objects.accept([m.ObjectPayload(object_id=stored.object_id, payload=b"", name="result", size=stored.size,
                                    holder=HOME)])
    assert objects.value(stored.object_id, DefaultSerializer()) == "from the store"
    assert stores.calls == [("write", stored.object_id), ("read", stored.object_id)]
