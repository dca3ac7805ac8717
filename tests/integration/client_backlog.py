"""Two clients of one small real cluster, as the views of the monitor feed should show them: "backlog"
has tasks queued in the scheduler behind a gate, "idle" has none.

The cluster has one worker that takes one task at a time (per_worker_queue_size=1), so the backlog's
first task runs (it waits at the gate) and the rest wait in the scheduler, their wait growing, until
the test opens the gate. Leaving the context opens it, collects every result and stops everything.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from concurrent.futures import Future
from typing import Any

import cloudpickle

from scaler import Client, SchedulerClusterCombo
from scaler.protocol.monitor_messages import ClientStatus, MonitorSnapshot
from scaler.scheduler.config import default_monitor_address

# Workers cannot import the tests: this module's functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

BACKLOG = 12
GATE_LIMIT_SECONDS = 90.0  # a task never outlives a test that forgot its gate by longer than this
RESULT_SECONDS = 60.0


def wait_at_gate(gate: str, value: int) -> int:
    deadline = time.monotonic() + GATE_LIMIT_SECONDS
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    return value


class TwoClients:
    def __init__(self, directory: pathlib.Path, backlog: int = BACKLOG, **combo_options: Any) -> None:
        self.combo_options = combo_options
        self.gate = directory / "gate"
        self.backlog_size = backlog
        self.futures: list[Future] = []
        self.cluster: SchedulerClusterCombo | None = None
        self.clients: list[Client] = []
        self.submitted_at = 0.0

    @property
    def address(self) -> str:
        assert self.cluster is not None
        return self.cluster.get_address()

    @property
    def monitor_address(self) -> str:
        return default_monitor_address(self.address)

    def __enter__(self) -> TwoClients:
        try:
            self.cluster = SchedulerClusterCombo(
                n_workers=1, per_worker_queue_size=1, logging_level="WARNING", **self.combo_options
            )
            backlog = Client(address=self.address, timeout_seconds=30, name="backlog")
            self.clients.append(backlog)
            self.clients.append(Client(address=self.address, timeout_seconds=30, name="idle"))
            self.submitted_at = time.monotonic()
            self.futures = [backlog.submit(wait_at_gate, str(self.gate), index) for index in range(self.backlog_size)]
        except BaseException:
            self.__exit__()
            raise
        return self

    def open_gate(self) -> None:
        self.gate.touch()

    def __exit__(self, *exc_info: object) -> None:
        self.open_gate()
        try:
            results = [future.result(timeout=RESULT_SECONDS) for future in self.futures]
            assert results == list(range(self.backlog_size))
        finally:
            for client in reversed(self.clients):
                client.disconnect()
            if self.cluster is not None:
                self.cluster.shutdown()


def rows_by_name(snapshot: MonitorSnapshot) -> dict[str, ClientStatus]:
    return {client.name: client for client in snapshot.clients}


def shows_the_backlog(snapshot: MonitorSnapshot, backlog: int = BACKLOG) -> bool:
    """Both clients are there, and every task of the backlog is queued or on the worker."""
    rows = rows_by_name(snapshot)
    return {"backlog", "idle"} <= set(rows) and rows["backlog"].queued + rows["backlog"].running == backlog and (
        rows["backlog"].running > 0
    )
