"""Everything a scheduler can be told: the fields of its option table (settings.py), with its defaults and rules.

Options 1.9.x had that change nothing here stop at the command line (scaler/utility/ignored_settings.py).

Each number is held to its rule (scaler/utility/setting_rules.py) when the config is made, so a value
that cannot work, or cannot be sent to peers, is a ValueError where it was given.
"""

from __future__ import annotations

import dataclasses

from scaler.scheduler.settings import SCHEDULER
from scaler.utility.logging_setup import check_logging_level, check_logging_paths
from scaler.utility.monitor_address import MONITOR_DIRECTORY, default_monitor_address
from scaler.utility.scheduler_addresses import join_scheduler_addresses, parse_scheduler_addresses
from scaler.utility.setting_rules import check_settings
from scaler.utility.zmq_config import parse_zmq_address

# Importers of these names from here (the scheduler's shell, scaler_top, the tests) keep working.
__all__ = ["MONITOR_DIRECTORY", "SchedulerConfig", "default_monitor_address"]


@dataclasses.dataclass
class SchedulerConfig:
    address: str
    io_threads: int = SCHEDULER.field("io_threads")
    max_number_of_tasks_waiting: int = SCHEDULER.field("max_number_of_tasks_waiting")
    client_timeout_seconds: float = SCHEDULER.field("client_timeout_seconds")
    worker_timeout_seconds: float = SCHEDULER.field("worker_timeout_seconds")
    heartbeat_interval_seconds: float = SCHEDULER.field("heartbeat_interval_seconds")
    load_balance_seconds: float = SCHEDULER.field("load_balance_seconds")
    load_balance_trigger_times: int = SCHEDULER.field("load_balance_trigger_times")
    per_worker_queue_size: int = SCHEDULER.field("per_worker_queue_size")
    worker_queue_seconds: float = SCHEDULER.field("worker_queue_seconds")
    max_task_crashes: int = SCHEDULER.field("max_task_crashes")
    protected: bool = SCHEDULER.field("protected")
    monitor_address: str | None = SCHEDULER.field("monitor_address")
    monitor_interval_seconds: float = SCHEDULER.field("monitor_interval_seconds")
    metrics_port: int = SCHEDULER.field("metrics_port")
    max_message_size_bytes: int = SCHEDULER.field("max_message_size_bytes")
    max_control_frame_bytes: int = SCHEDULER.field("max_control_frame_bytes")
    bad_frame_log_seconds: float = SCHEDULER.field("bad_frame_log_seconds")
    standby_of: str | None = SCHEDULER.field("standby_of")
    standby_takeover_seconds: float = SCHEDULER.field("standby_takeover_seconds")
    curve_secret_key: str | None = SCHEDULER.field("curve_secret_key")
    curve_authorized_keys: str | None = SCHEDULER.field("curve_authorized_keys")
    logging_paths: tuple[str, ...] = SCHEDULER.field("logging_paths")
    logging_level: str = SCHEDULER.field("logging_level")
    logging_config_file: str | None = SCHEDULER.field("logging_config_file")

    def __post_init__(self) -> None:
        if self.address:  # empty only for the template that holds the defaults the command line shows
            parse_zmq_address(self.address)
        if self.monitor_address is not None:
            parse_zmq_address(self.monitor_address)
        if self.standby_of is not None:
            self.standby_of = join_scheduler_addresses(parse_scheduler_addresses(self.standby_of))
            if self.address and parse_zmq_address(self.address).to_address() in self.standby_of.split(","):
                raise ValueError(f"--standby-of names this scheduler's own address {self.address}")
        check_settings(self)
        check_logging_level(self.logging_level)
        if self.logging_config_file is None:
            check_logging_paths(self.logging_paths)
