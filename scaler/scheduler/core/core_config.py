"""The limits and timeouts a scheduler core applies: the scheduler options (../settings.py) that the core reads.

Each field named as an option takes that option's default from the table, so a core made in a test
behaves as a scheduler started with no options; `from_settings` makes one from a SchedulerConfig.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scaler.protocol import messages as m
from scaler.protocol.versions import INSTALLED, Speaks
from scaler.scheduler.settings import SCHEDULER


def frame_limit(max_message_size_bytes: int) -> int:
    """What Welcome announces for the scheduler's --max-message-size-bytes: 0, not -1, is 'no limit' there."""
    return max(max_message_size_bytes, 0)


@dataclasses.dataclass(frozen=True)
class CoreConfig:
    protected: bool = SCHEDULER.default("protected")
    client_timeout_seconds: float = SCHEDULER.default("client_timeout_seconds")
    worker_timeout_seconds: float = SCHEDULER.default("worker_timeout_seconds")
    heartbeat_interval_seconds: float = SCHEDULER.default("heartbeat_interval_seconds")
    # Upper bound on any worker's advertised capacity; 0 trusts the worker.
    per_worker_queue_size: int = SCHEDULER.default("per_worker_queue_size")
    # Seconds of queued work each worker is given beyond its running task (prefetch.py); 0: up to its capacity.
    worker_queue_seconds: float = SCHEDULER.default("worker_queue_seconds")
    # Tasks waiting for a worker beyond this are rejected; -1 means no limit.
    max_number_of_tasks_waiting: int = SCHEDULER.default("max_number_of_tasks_waiting")
    # A task whose processor or worker died under it this many times fails with WorkerDiedError instead of
    # being retried (crash_blame.py says how a worker's death is blamed on a task).
    max_task_crashes: int = SCHEDULER.default("max_task_crashes")
    # How often to look for imbalance between workers (0 turns balancing off), and how many looks in a
    # row must see it before queued tasks are moved.
    load_balance_seconds: float = SCHEDULER.default("load_balance_seconds")
    load_balance_trigger_times: int = SCHEDULER.default("load_balance_trigger_times")
    # Announced in Welcome so that peers never send what the I/O shell would not read (0: no limit).
    max_frame_bytes: int = frame_limit(SCHEDULER.default("max_message_size_bytes"))
    max_control_frame_bytes: int = SCHEDULER.default("max_control_frame_bytes")
    # Announced in Welcome: payloads this large go through a store when the peer has one (PROTOCOL.md §13).
    inline_limit_bytes: int = m.INLINE_LIMIT_BYTES
    # The first id prefix this scheduler process gives a new client (peer_registry.py): the shell derives it
    # from the start time, so that a restarted scheduler's new clients never get a prefix of the old one's,
    # which its clients keep when they resume (and workers' results of the old tasks still carry).
    first_id_prefix: int = 1
    # The release and protocol version this scheduler says it speaks in every welcome, and checks hellos
    # against: the installed ones. No option sets it (an operator has no reason to misstate it); a test of
    # an upgrade makes a scheduler of another release by running one with another value (tests/integration/
    # test_rolling_upgrade.py), as a newer release's scheduler would be.
    speaks: Speaks = INSTALLED

    @classmethod
    def from_settings(cls, settings: Any, first_id_prefix: int = 1, speaks: Speaks = INSTALLED) -> CoreConfig:
        """From anything holding the scheduler's options as attributes (a SchedulerConfig): every field named
        as an option takes its value; the frame limit is the one the shell enforces."""
        shared = {
            field.name: getattr(settings, field.name) for field in dataclasses.fields(cls) if field.name in SCHEDULER
        }
        return cls(
            **shared, max_frame_bytes=frame_limit(settings.max_message_size_bytes), first_id_prefix=first_id_prefix,
            speaks=speaks,
        )


# Each second of the clock (modulo this many) starts its own block of 2**16 prefixes: a scheduler started
# again a second or more later gives its new clients prefixes no client of the previous one had (unless the
# previous one welcomed more than 65,536 clients, or the two starts are a multiple of ~18 hours apart).
_PREFIX_BLOCKS = 0xFFFF


def first_id_prefix_at(wall_seconds: float) -> int:
    """The first id prefix of a scheduler started at this wall-clock time: never 0, and 32 bits."""
    return ((int(wall_seconds) % _PREFIX_BLOCKS) + 1) << 16
