"""`scaler_scheduler ADDRESS`: run a scheduler in the foreground."""

from __future__ import annotations

import argparse
from typing import Sequence

from scaler.cli.common import (
    add_event_loop_argument,
    add_logging_arguments,
    exit_with_parent_pid,
    zmq_address,
)
from scaler.scheduler.config import SchedulerConfig
from scaler.scheduler.server import run_scheduler
from scaler.utility.logging_setup import setup_logging

_DEFAULTS = SchedulerConfig(address="")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        "scaler_scheduler",
        description="Run a Scaler scheduler.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--io-threads", "-it", type=int, default=_DEFAULTS.io_threads, help="number of zmq io threads")
    parser.add_argument(
        "--max-number-of-tasks-waiting", "-mt", type=int, default=_DEFAULTS.max_number_of_tasks_waiting,
        help="tasks allowed to wait for a worker; beyond it new tasks are rejected; -1 means no limit",
    )
    parser.add_argument(
        "--client-timeout-seconds", "-ct", type=float, default=_DEFAULTS.client_timeout_seconds,
        help="drop a client (cancel its tasks, free its objects) after this long without hearing from it",
    )
    parser.add_argument(
        "--worker-timeout-seconds", "-wt", type=float, default=_DEFAULTS.worker_timeout_seconds,
        help="drop a worker and reschedule its tasks after this long without a heartbeat",
    )
    parser.add_argument(
        "--heartbeat-interval-seconds", "-hi", type=float, default=_DEFAULTS.heartbeat_interval_seconds,
        help="heartbeat interval the scheduler asks its peers for",
    )
    parser.add_argument(
        "--object-retention-seconds", "-ot", type=float, default=_DEFAULTS.object_retention_seconds,
        help="accepted for compatibility; objects are freed when their last owning client leaves or clears",
    )
    parser.add_argument(
        "--load-balance-seconds", "-ls", type=float, default=_DEFAULTS.load_balance_seconds,
        help="how often to look for workers running dry while others hold queued tasks (0 turns balancing off)",
    )
    parser.add_argument(
        "--load-balance-trigger-times", "-lbt", type=int, default=_DEFAULTS.load_balance_trigger_times,
        help="how many looks in a row must see the imbalance before queued tasks are moved",
    )
    parser.add_argument(
        "--per-worker-queue-size", "-qs", type=int, default=_DEFAULTS.per_worker_queue_size,
        help="most tasks a worker is given at once (caps what the worker offers); 0 trusts the worker",
    )
    parser.add_argument(
        "--max-task-crashes", type=int, default=_DEFAULTS.max_task_crashes,
        help="a task whose processor or worker died under it this many times fails with WorkerDiedError "
        "instead of being retried",
    )
    add_event_loop_argument(parser, "--event-loop", "-e")
    parser.add_argument(
        "--protected", "-p", action=argparse.BooleanOptionalAction, default=_DEFAULTS.protected,
        help="refuse shutdown requests from clients (--no-protected allows them)",
    )
    parser.add_argument(
        "--monitor-address", "-ma", type=zmq_address, default=None,
        help="monitor address; default derived from the address, e.g. ipc:///tmp/127.0.0.1_2345_monitor",
    )
    parser.add_argument(
        "--max-message-size-bytes", type=int, default=_DEFAULTS.max_message_size_bytes,
        help="a peer sending a larger frame is disconnected before it is read (-1: no limit)",
    )
    parser.add_argument(
        "--max-control-frame-bytes", type=int, default=_DEFAULTS.max_control_frame_bytes,
        help="largest Cap'n Proto frame accepted (large payloads travel in frames of their own)",
    )
    parser.add_argument(
        "--curve-secret-key", type=str, default=None,
        help="CURVE: this scheduler's .key_secret file (see scaler_keygen); or SCALER_CURVE_SCHEDULER_SECRET_KEY",
    )
    parser.add_argument(
        "--curve-authorized-keys", type=str, default=None,
        help="CURVE: directory of the public .key files of clients and workers to accept; "
        "or SCALER_CURVE_AUTHORIZED_KEYS",
    )
    add_logging_arguments(parser)
    parser.add_argument("address", type=zmq_address, help="address to listen on, e.g. tcp://127.0.0.1:2345")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    setup_logging(args.logging_paths, args.logging_level, args.logging_config_file)
    config = SchedulerConfig(
        address=args.address,
        io_threads=args.io_threads,
        max_number_of_tasks_waiting=args.max_number_of_tasks_waiting,
        client_timeout_seconds=args.client_timeout_seconds,
        worker_timeout_seconds=args.worker_timeout_seconds,
        heartbeat_interval_seconds=args.heartbeat_interval_seconds,
        object_retention_seconds=args.object_retention_seconds,
        load_balance_seconds=args.load_balance_seconds,
        load_balance_trigger_times=args.load_balance_trigger_times,
        per_worker_queue_size=args.per_worker_queue_size,
        max_task_crashes=args.max_task_crashes,
        event_loop=args.event_loop,
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
    run_scheduler(config, exit_with_parent=exit_with_parent_pid())


if __name__ == "__main__":
    main()
