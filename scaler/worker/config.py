"""Everything a worker can be told, with the option names of released Scaler 1.9.x.

Options 1.9.x had that change nothing here stop at the command line (scaler/utility/ignored_settings.py).

Each number is held to its rule (scaler/utility/setting_rules.py) when the config is made.
"""

from __future__ import annotations

import dataclasses

from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS, check_logging_level, check_logging_paths
from scaler.utility.setting_rules import (
    AT_LEAST_ONE,
    BYTES_OR_OFF,
    IO_THREADS,
    POSITIVE_SECONDS,
    SECONDS_OR_OFF,
    TASK_SLOTS,
    check_settings,
    setting,
)
from scaler.utility.tags import checked_tags
from scaler.utility.zmq_config import parse_zmq_address

# The processors' wait for a stored input before its holder counts as gone (scaler/worker/task_objects.py).
DEFAULT_INPUT_WAIT_SECONDS = 10.0


@dataclasses.dataclass
class WorkerConfig:
    address: str
    name: str = ""
    task_queue_size: int = setting(1000, TASK_SLOTS)
    heartbeat_interval_seconds: float = setting(2.0, POSITIVE_SECONDS)
    death_timeout_seconds: float = setting(300.0, POSITIVE_SECONDS)
    # Processors one worker may run: one serves, the others hold tasks waiting on nested tasks.
    max_processors: int = setting(64, AT_LEAST_ONE)
    # A task running longer is stopped (its processor replaced) and fails with TaskTimeoutError; 0: no limit.
    task_timeout_seconds: float = setting(0.0, SECONDS_OR_OFF)
    # A processor whose RSS goes over this is stopped and its task fails with MemoryLimitError; 0: no limit.
    memory_limit_bytes: int = setting(0, BYTES_OR_OFF)
    # How long a processor waits for a stored input (plus its size at 20 MB/s) before its holder counts as gone.
    input_wait_seconds: float = setting(DEFAULT_INPUT_WAIT_SECONDS, POSITIVE_SECONDS)
    # CURVE: the scheduler's public key file and this worker's secret key file (or the environment).
    curve_server_key: str | None = None
    curve_secret_key: str | None = None
    io_threads: int = setting(1, IO_THREADS)
    logging_paths: tuple[str, ...] = DEFAULT_LOGGING_PATHS
    # A library default: a program that starts workers from Python is not flooded (the command line says INFO).
    logging_level: str = "WARNING"
    logging_config_file: str | None = None
    # Capabilities the operator gives this worker (`--tags gpu,fast`): tasks requiring them may run here.
    # Its hello adds "python" (it runs Python functions) to these.
    tags: tuple[str, ...] = ()
    # The data address (tcp://) of the store this worker's tasks keep their large data in; empty: none.
    store_address: str = ""

    def __post_init__(self) -> None:
        self.tags = checked_tags(self.tags, "worker tags")
        if self.address:  # empty only for the template that holds the defaults the command line shows
            parse_zmq_address(self.address)
        check_settings(self)
        check_logging_level(self.logging_level)
        if self.logging_config_file is None:
            check_logging_paths(self.logging_paths)
