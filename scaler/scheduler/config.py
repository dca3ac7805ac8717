"""Everything a scheduler can be told, with the option names of released Scaler 1.9.x.

Options 1.9.x had that change nothing here stop at the command line (scaler/utility/ignored_settings.py).

Each number is held to its rule (scaler/utility/setting_rules.py) when the config is made, so a value
that cannot work, or cannot be sent to peers, is a ValueError where it was given.
"""

from __future__ import annotations

import dataclasses

from scaler.utility.bad_frame_log import INTERVAL_SECONDS as BAD_FRAME_LOG_SECONDS
from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS, check_logging_level, check_logging_paths
from scaler.utility.setting_rules import (
    AT_LEAST_ONE,
    FRAME_BYTES,
    FRAME_BYTES_OR_UNLIMITED,
    IO_THREADS,
    POSITIVE_SECONDS,
    SECONDS_OR_OFF,
    TASK_SLOTS_OR_ANY,
    TASKS_WAITING,
    check_settings,
    setting,
)
from scaler.utility.zmq_config import parse_zmq_address


@dataclasses.dataclass
class SchedulerConfig:
    address: str
    io_threads: int = setting(1, IO_THREADS)
    max_number_of_tasks_waiting: int = setting(-1, TASKS_WAITING)
    client_timeout_seconds: float = setting(60.0, POSITIVE_SECONDS)
    worker_timeout_seconds: float = setting(60.0, POSITIVE_SECONDS)
    heartbeat_interval_seconds: float = setting(2.0, POSITIVE_SECONDS)
    load_balance_seconds: float = setting(1.0, SECONDS_OR_OFF)
    load_balance_trigger_times: int = setting(2, AT_LEAST_ONE)
    per_worker_queue_size: int = setting(1000, TASK_SLOTS_OR_ANY)
    max_task_crashes: int = setting(3, AT_LEAST_ONE)
    protected: bool = True
    monitor_address: str | None = None
    # A peer sending a larger frame is disconnected by zmq before the scheduler allocates it; -1: no limit.
    max_message_size_bytes: int = setting(4 * 1024**3, FRAME_BYTES_OR_UNLIMITED)
    # The Cap'n Proto frame of a message (payloads travel in frames of their own) is refused above this.
    max_control_frame_bytes: int = setting(256 * 1024**2, FRAME_BYTES)
    # After a sender's first bad frame, its next ones are only counted for this long, then summed up in one line.
    bad_frame_log_seconds: float = setting(BAD_FRAME_LOG_SECONDS, POSITIVE_SECONDS)
    curve_secret_key: str | None = None
    curve_authorized_keys: str | None = None
    logging_paths: tuple[str, ...] = DEFAULT_LOGGING_PATHS
    logging_level: str = "INFO"
    logging_config_file: str | None = None

    def __post_init__(self) -> None:
        if self.address:  # empty only for the template that holds the defaults the command line shows
            parse_zmq_address(self.address)
        if self.monitor_address is not None:
            parse_zmq_address(self.monitor_address)
        check_settings(self)
        check_logging_level(self.logging_level)
        if self.logging_config_file is None:
            check_logging_paths(self.logging_paths)


# Where default monitor addresses live (the product documents show /tmp, whatever TMPDIR says).
MONITOR_DIRECTORY = "/tmp"


def default_monitor_address(address: str) -> str:
    """tcp://127.0.0.1:2345 -> ipc:///tmp/127.0.0.1_2345_monitor, as the product documents show."""
    scheme, _, rest = address.partition("://")
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        return f"ipc://{MONITOR_DIRECTORY}/{host}_{port}_monitor"
    return f"{address}_monitor"
