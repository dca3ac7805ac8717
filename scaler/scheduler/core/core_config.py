"""The limits and timeouts a scheduler core applies; the server builds one from its SchedulerConfig."""

from __future__ import annotations

import dataclasses

from scaler.protocol import messages as m


@dataclasses.dataclass(frozen=True)
class CoreConfig:
    protected: bool = True
    client_timeout_seconds: float = 60.0
    worker_timeout_seconds: float = 60.0
    heartbeat_interval_seconds: float = 2.0
    # Upper bound on any worker's advertised capacity; 0 trusts the worker.
    per_worker_queue_size: int = 0
    # Tasks waiting for a worker beyond this are rejected; -1 means no limit.
    max_tasks_waiting: int = -1
    # A task whose processor or worker died under it this many times fails with WorkerDiedError instead of
    # being retried (crash_blame.py says how a worker's death is blamed on a task).
    max_task_crashes: int = 3
    # How often to look for imbalance between workers (0 turns balancing off), and how many looks in a
    # row must see it before queued tasks are moved.
    load_balance_seconds: float = 1.0
    load_balance_trigger_times: int = 2
    # Announced in Welcome so that peers never send what the I/O shell would not read (0: no limit).
    max_frame_bytes: int = 0
    max_control_frame_bytes: int = 0
    # Announced in Welcome: payloads this large go through a store when the peer has one (PROTOCOL.md §13).
    inline_limit_bytes: int = m.INLINE_LIMIT_BYTES
