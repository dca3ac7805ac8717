"""Everything a worker can be told: the fields of its option table (settings.py), with its defaults and rules.

Options 1.9.x had that change nothing here stop at the command line (scaler/utility/ignored_settings.py).

Each number is held to its rule (scaler/utility/setting_rules.py) when the config is made.
"""

from __future__ import annotations

import dataclasses

from scaler.utility.logging_setup import check_logging_level, check_logging_paths
from scaler.utility.scheduler_addresses import parse_scheduler_addresses
from scaler.utility.setting_rules import check_settings
from scaler.utility.tags import checked_tags
from scaler.worker.settings import DEFAULT_INPUT_WAIT_SECONDS, WORKER

__all__ = ["DEFAULT_INPUT_WAIT_SECONDS", "LIBRARY_LOGGING_LEVEL", "WorkerConfig"]

# A library default: a program that starts workers from Python is not flooded (the command line says INFO).
LIBRARY_LOGGING_LEVEL = "WARNING"


@dataclasses.dataclass
class WorkerConfig:
    address: str
    name: str = ""
    task_queue_size: int = WORKER.field("task_queue_size")
    heartbeat_interval_seconds: float = WORKER.field("heartbeat_interval_seconds")
    death_timeout_seconds: float = WORKER.field("death_timeout_seconds")
    max_processors: int = WORKER.field("max_processors")
    task_timeout_seconds: float = WORKER.field("task_timeout_seconds")
    memory_limit_bytes: int = WORKER.field("memory_limit_bytes")
    input_wait_seconds: float = WORKER.field("input_wait_seconds")
    curve_server_key: str | None = WORKER.field("curve_server_key")
    curve_secret_key: str | None = WORKER.field("curve_secret_key")
    io_threads: int = WORKER.field("io_threads")
    logging_paths: tuple[str, ...] = WORKER.field("logging_paths")
    logging_level: str = LIBRARY_LOGGING_LEVEL
    logging_config_file: str | None = WORKER.field("logging_config_file")
    # Capabilities the operator gives this worker (`--tags gpu,fast`): tasks requiring them may run here.
    # Its hello adds "python" (it runs Python functions) to these.
    tags: tuple[str, ...] = WORKER.field("tags")
    # The data address (tcp://) of the store this worker's tasks keep their large data in; empty: none.
    store_address: str = ""

    def __post_init__(self) -> None:
        self.tags = checked_tags(self.tags, "worker tags")
        if self.address:  # empty only for the template that holds the defaults the command line shows
            parse_scheduler_addresses(self.address)
        check_settings(self)
        check_logging_level(self.logging_level)
        if self.logging_config_file is None:
            check_logging_paths(self.logging_paths)
