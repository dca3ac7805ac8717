"""What the monitor shows of one client's tasks (TaskTable.client_summary)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class ClientSummary:
    # Ready tasks in the scheduler, not yet sent to a worker.
    queued: int
    # Sent to a worker and unfinished.
    running: int
    # How long the longest-ready of its queued tasks has waited (0.0 if none).
    oldest_ready_seconds: float
