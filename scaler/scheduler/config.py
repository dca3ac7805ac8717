"""Everything a scheduler can be told, with the option names of released Scaler 1.9.x."""

from __future__ import annotations

import dataclasses

from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS


@dataclasses.dataclass
class SchedulerConfig:
    address: str
    io_threads: int = 1
    max_number_of_tasks_waiting: int = -1
    client_timeout_seconds: float = 60.0
    worker_timeout_seconds: float = 60.0
    heartbeat_interval_seconds: float = 2.0
    object_retention_seconds: float = 3600.0
    load_balance_seconds: float = 1.0
    load_balance_trigger_times: int = 2
    per_worker_queue_size: int = 1000
    max_task_crashes: int = 3
    event_loop: str = "builtin"
    protected: bool = True
    monitor_address: str | None = None
    # A peer sending a larger frame is disconnected by zmq before the scheduler allocates it; -1: no limit.
    max_message_size_bytes: int = 4 * 1024**3
    # The Cap'n Proto frame of a message (payloads travel in frames of their own) is refused above this.
    max_control_frame_bytes: int = 256 * 1024**2
    curve_secret_key: str | None = None
    curve_authorized_keys: str | None = None
    logging_paths: tuple[str, ...] = DEFAULT_LOGGING_PATHS
    logging_level: str = "INFO"
    logging_config_file: str | None = None


def default_monitor_address(address: str) -> str:
    """tcp://127.0.0.1:2345 -> ipc:///tmp/127.0.0.1_2345_monitor, as the product documents show."""
    scheme, _, rest = address.partition("://")
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        return f"ipc:///tmp/{host}_{port}_monitor"
    return f"{address}_monitor"
