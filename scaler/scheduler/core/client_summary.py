"""One client's share of the scheduler's work, as the monitor feed shows it (status.py).

The task table computes it (`TaskTable.client_summary`); the feed, `scaler_top` and `scaler_ui` show it,
so that whoever shares a cluster sees who is waiting and for how long.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class ClientSummary:
    # Ready tasks in the scheduler that no worker holds yet.
    queued: int
    # Tasks sent to a worker and not finished (running there, or next in its queue).
    running: int
    # How long the longest-waiting of its queued tasks has been ready; 0.0 when none is queued.
    oldest_ready_seconds: float


NO_WORK = ClientSummary(queued=0, running=0, oldest_ready_seconds=0.0)
