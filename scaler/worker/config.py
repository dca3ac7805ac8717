"""Everything a worker can be told, with the option names of released Scaler 1.9.x."""

from __future__ import annotations

import dataclasses

from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS


@dataclasses.dataclass
class WorkerConfig:
    address: str
    name: str = ""
    task_queue_size: int = 1000
    heartbeat_interval_seconds: float = 2.0
    death_timeout_seconds: float = 300.0
    # Processors one worker may run: one serves, the others hold tasks waiting on nested tasks.
    max_processors: int = 64
    # A task running longer is stopped (its processor replaced) and fails with TaskTimeoutError; 0: no limit.
    task_timeout_seconds: float = 0.0
    # A processor whose RSS goes over this is stopped and its task fails with MemoryLimitError; 0: no limit.
    memory_limit_bytes: int = 0
    # CURVE: the scheduler's public key file and this worker's secret key file (or the environment).
    curve_server_key: str | None = None
    curve_secret_key: str | None = None
    # Accepted for compatibility; see docs/configuration.md for what each does today.
    garbage_collect_interval_seconds: float = 30.0
    trim_memory_threshold_bytes: int = 1024 * 1024 * 1024
    hard_processor_suspend: bool = False
    event_loop: str = "builtin"
    io_threads: int = 1
    logging_paths: tuple[str, ...] = DEFAULT_LOGGING_PATHS
    logging_level: str = "INFO"
    logging_config_file: str | None = None
