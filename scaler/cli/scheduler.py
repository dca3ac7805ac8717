"""`scaler_scheduler ADDRESS`: run a scheduler in the foreground."""

from __future__ import annotations

import argparse
from typing import Sequence

from scaler.cli.common import (
    add_address_argument,
    add_ignored_option,
    add_logging_arguments,
    add_setting,
    announce_ignored_options,
    curve_secret_key_file,
    existing_directory,
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


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser("scaler_scheduler", "Run a Scaler scheduler.")

    def setting(field_name: str, *flags: str, help: str) -> None:
        add_setting(parser, SchedulerConfig, field_name, *flags, help=help)

    setting("io_threads", "--io-threads", "-it", help="number of zmq io threads")
    setting(
        "max_number_of_tasks_waiting", "--max-number-of-tasks-waiting", "-mt",
        help="tasks allowed to wait for a worker; beyond it new tasks are rejected; -1 means no limit",
    )
    setting(
        "client_timeout_seconds", "--client-timeout-seconds", "-ct",
        help="drop a client (cancel its tasks, free its objects) after this long without hearing from it",
    )
    setting(
        "worker_timeout_seconds", "--worker-timeout-seconds", "-wt",
        help="drop a worker and reschedule its tasks after this long without a heartbeat",
    )
    setting(
        "heartbeat_interval_seconds", "--heartbeat-interval-seconds", "-hi",
        help="heartbeat interval the scheduler asks its peers for",
    )
    add_ignored_option(
        parser, OBJECT_RETENTION_SECONDS, "--object-retention-seconds", "-ot", type=argument_type(POSITIVE_SECONDS)
    )
    setting(
        "load_balance_seconds", "--load-balance-seconds", "-ls",
        help="how often to look for workers running dry while others hold queued tasks (0 turns balancing off)",
    )
    setting(
        "load_balance_trigger_times", "--load-balance-trigger-times", "-lbt",
        help="how many looks in a row must see the imbalance before queued tasks are moved",
    )
    setting(
        "per_worker_queue_size", "--per-worker-queue-size", "-qs",
        help="most tasks a worker is given at once (caps what the worker offers); 0 trusts the worker",
    )
    setting(
        "max_task_crashes", "--max-task-crashes",
        help="a task whose processor or worker died under it this many times fails with WorkerDiedError "
        "instead of being retried",
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
    setting(
        "max_message_size_bytes", "--max-message-size-bytes",
        help="a peer sending a larger frame is disconnected before it is read (-1: no limit)",
    )
    setting(
        "max_control_frame_bytes", "--max-control-frame-bytes",
        help="largest Cap'n Proto frame accepted (large payloads travel in frames of their own)",
    )
    parser.add_argument(
        "--curve-secret-key", type=curve_secret_key_file, default=None,
        help="CURVE: this scheduler's .key_secret file (see scaler_keygen); or SCALER_CURVE_SCHEDULER_SECRET_KEY",
    )
    parser.add_argument(
        "--curve-authorized-keys", type=existing_directory, default=None,
        help="CURVE: directory of the public .key files of clients and workers to accept; "
        "or SCALER_CURVE_AUTHORIZED_KEYS",
    )
    add_logging_arguments(parser)
    add_address_argument(parser, "address to listen on, e.g. tcp://127.0.0.1:2345")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    reporter = ReadinessReporter.from_environment()
    parser = build_parser()
    args = parse_command_line(parser, argv)
    try:  # the environment may name the keys too
        ServerKeys.resolve(args.curve_secret_key, args.curve_authorized_keys)
    except ValueError as error:
        parser.error(str(error))
    config = SchedulerConfig(
        address=args.address,
        io_threads=args.io_threads,
        max_number_of_tasks_waiting=args.max_number_of_tasks_waiting,
        client_timeout_seconds=args.client_timeout_seconds,
        worker_timeout_seconds=args.worker_timeout_seconds,
        heartbeat_interval_seconds=args.heartbeat_interval_seconds,
        load_balance_seconds=args.load_balance_seconds,
        load_balance_trigger_times=args.load_balance_trigger_times,
        per_worker_queue_size=args.per_worker_queue_size,
        max_task_crashes=args.max_task_crashes,
        protected=args.protected,
        monitor_address=args.monitor_address,
        max_message_size_bytes=args.max_message_size_bytes,
        max_control_frame_bytes=args.max_control_frame_bytes,
        curve_secret_key=args.curve_secret_key,
        curve_authorized_keys=args.curve_authorized_keys,
        logging_paths=tuple(args.logging_paths),
        logging_level=args.logging_level,
        logging_config_file=args.logging_config_file,
    )
    start_logging(parser, args)
    announce_ignored_options(parser, args)
    run_scheduler(config, exit_with_parent=exit_with_parent_pid(), reporter=reporter if reporter.active else None)


if __name__ == "__main__":
    main()
