"""`scaler_scheduler ADDRESS`: run a scheduler in the foreground."""

from __future__ import annotations

import argparse
from typing import Sequence

from scaler.cli.common import (
    Setting,
    add_final_arguments,
    add_ignored_option,
    add_scheduler_curve_arguments,
    add_settings,
    check_curve_keys,
    config_from_arguments,
    make_parser,
    parse_command_line,
    start_logging,
    zmq_address,
)
from scaler.scheduler.config import SchedulerConfig
from scaler.scheduler.server import run_scheduler
from scaler.utility.curve import ServerKeys
from scaler.utility.ignored_settings import EVENT_LOOP, EVENT_LOOPS, OBJECT_RETENTION_SECONDS
from scaler.utility.parent_watch import exit_with_parent_pid
from scaler.utility.readiness import ReadinessReporter
from scaler.utility.setting_rules import POSITIVE_SECONDS, argument_type

_DEFAULTS = SchedulerConfig(address="")


_SETTINGS: list[Setting] = [
    ("io_threads", ("--io-threads", "-it"), "number of zmq io threads"),
    ("max_number_of_tasks_waiting", ("--max-number-of-tasks-waiting", "-mt"),
     "tasks allowed to wait for a worker; beyond it new tasks are rejected; -1 means no limit"),
    ("client_timeout_seconds", ("--client-timeout-seconds", "-ct"),
     "drop a client (cancel its tasks, free its objects) after this long without hearing from it"),
    ("worker_timeout_seconds", ("--worker-timeout-seconds", "-wt"),
     "drop a worker and reschedule its tasks after this long without a heartbeat"),
    ("heartbeat_interval_seconds", ("--heartbeat-interval-seconds", "-hi"),
     "heartbeat interval the scheduler asks its peers for"),
    ("load_balance_seconds", ("--load-balance-seconds", "-ls"),
     "how often to look for workers running dry while others hold queued tasks (0 turns balancing off)"),
    ("load_balance_trigger_times", ("--load-balance-trigger-times", "-lbt"),
     "how many looks in a row must see the imbalance before queued tasks are moved"),
    ("per_worker_queue_size", ("--per-worker-queue-size", "-qs"),
     "most tasks a worker is given at once (caps what the worker offers); 0 trusts the worker"),
    ("max_task_crashes", ("--max-task-crashes",),
     "a task whose processor or worker died under it this many times fails with WorkerDiedError "
     "instead of being retried"),
    ("max_message_size_bytes", ("--max-message-size-bytes",),
     "a peer sending a larger frame is disconnected before it is read (-1: no limit)"),
    ("max_control_frame_bytes", ("--max-control-frame-bytes",),
     "largest Cap'n Proto frame accepted (large payloads travel in frames of their own)"),
    ("bad_frame_log_seconds", ("--bad-frame-log-seconds",),
     "after a peer's first undecodable frame is logged, its next ones are counted for this long, then one line "
     "says how many"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser("scaler_scheduler", "Run a Scaler scheduler.")
    add_settings(parser, SchedulerConfig, _SETTINGS)
    add_ignored_option(
        parser, OBJECT_RETENTION_SECONDS, "--object-retention-seconds", "-ot", type=argument_type(POSITIVE_SECONDS)
    )
    add_ignored_option(parser, EVENT_LOOP, "--event-loop", "-e", choices=EVENT_LOOPS)
    parser.add_argument(
        "--protected", "-p", action=argparse.BooleanOptionalAction, default=_DEFAULTS.protected,
        help="refuse shutdown requests from clients (--no-protected allows them)",
    )
    parser.add_argument(
        "--monitor-address", "-ma", type=zmq_address, default=None,
        help="monitor address; default derived from the address, e.g. ipc:///tmp/127.0.0.1_2345_monitor",
    )
    add_scheduler_curve_arguments(parser)
    add_final_arguments(parser, "address to listen on, e.g. tcp://127.0.0.1:2345")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    reporter = ReadinessReporter.from_environment()
    parser = build_parser()
    args = parse_command_line(parser, argv)
    check_curve_keys(parser, ServerKeys.resolve, args.curve_secret_key, args.curve_authorized_keys)
    config = config_from_arguments(SchedulerConfig, args)
    start_logging(parser, args)
    run_scheduler(config, exit_with_parent=exit_with_parent_pid(), reporter=reporter if reporter.active else None)


if __name__ == "__main__":
    main()
