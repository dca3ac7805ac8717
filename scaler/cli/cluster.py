"""`scaler_cluster -n N ADDRESS` (alias `scaler_worker`): run N workers in the foreground."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from typing import Sequence

from scaler.cli.common import add_event_loop_argument, add_logging_arguments, exit_with_parent_pid, zmq_address
from scaler.cluster.cluster import Cluster, default_worker_names
from scaler.utility.logging_setup import setup_logging
from scaler.worker.config import WorkerConfig

_DEFAULTS = WorkerConfig(address="")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        "scaler_cluster", description="Run Scaler workers on this machine.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--num-of-workers", "-n", type=int, default=os.cpu_count() or 1, help="number of workers")
    parser.add_argument(
        "--worker-names", "-wn", type=str, default=None,
        help="comma-separated worker names, one per worker; when not given, host name and index",
    )
    parser.add_argument(
        "--per-worker-task-queue-size", "-wtqs", type=int, default=_DEFAULTS.task_queue_size,
        help="how many tasks each worker accepts at once (shown as 'free' in scaler_top)",
    )
    parser.add_argument(
        "--max-processors", "-mp", type=int, default=_DEFAULTS.max_processors,
        help="processes one worker may run: one serves while the others hold tasks waiting on nested tasks; "
        "a task that would need more fails with NestingLimitError instead of deadlocking",
    )
    parser.add_argument(
        "--heartbeat-interval", "-hi", type=float, default=_DEFAULTS.heartbeat_interval_seconds,
        help="seconds between heartbeats to the scheduler",
    )
    parser.add_argument(
        "--task-timeout-seconds", "-tts", type=float, default=_DEFAULTS.task_timeout_seconds,
        help="a task running longer is stopped, its processor replaced, and it fails with TaskTimeoutError "
        "(0 = no limit)",
    )
    parser.add_argument(
        "--memory-limit-bytes", "-ml", type=int, default=_DEFAULTS.memory_limit_bytes,
        help="a processor using more memory (RSS) is stopped before the OS kills it, and its task fails with "
        "MemoryLimitError (0 = no limit)",
    )
    parser.add_argument(
        "--death-timeout-seconds", "-ds", type=float, default=_DEFAULTS.death_timeout_seconds,
        help="a worker exits after hearing nothing from the scheduler for this long",
    )
    parser.add_argument(
        "--garbage-collect-interval-seconds", "-gc", type=float, default=_DEFAULTS.garbage_collect_interval_seconds,
        help="accepted for compatibility; not active yet",
    )
    parser.add_argument(
        "--trim-memory-threshold-bytes", "-tm", type=int, default=_DEFAULTS.trim_memory_threshold_bytes,
        help="accepted for compatibility; not active yet",
    )
    parser.add_argument(
        "--hard-processor-suspend", "-hps", action="store_true", default=_DEFAULTS.hard_processor_suspend,
        help="accepted for compatibility; processor suspension is not active yet",
    )
    parser.add_argument(
        "--curve-server-key", type=str, default=None,
        help="CURVE: the scheduler's public .key file; or SCALER_CURVE_SERVER_KEY",
    )
    parser.add_argument(
        "--curve-secret-key", type=str, default=None,
        help="CURVE: this cluster's .key_secret file (its public key must be authorized by the scheduler); "
        "or SCALER_CURVE_SECRET_KEY",
    )
    add_event_loop_argument(parser, "--event-loop", "-el")
    parser.add_argument("--io-threads", "-it", type=int, default=_DEFAULTS.io_threads, help="zmq io threads per worker")
    add_logging_arguments(parser)
    parser.add_argument("address", type=zmq_address, help="scheduler address, e.g. tcp://127.0.0.1:2345")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.num_of_workers < 1:
        parser.error("--num-of-workers must be at least 1")
    if args.max_processors < 1:
        parser.error("--max-processors must be at least 1")
    if args.worker_names is None:
        names = default_worker_names(args.num_of_workers)
    else:
        names = [name.strip() for name in args.worker_names.split(",")]
        if len(names) != args.num_of_workers:
            parser.error(f"{len(names)} worker names given for {args.num_of_workers} workers")
    setup_logging(args.logging_paths, args.logging_level, args.logging_config_file)
    template = WorkerConfig(
        address=args.address,
        task_queue_size=args.per_worker_task_queue_size,
        max_processors=args.max_processors,
        heartbeat_interval_seconds=args.heartbeat_interval,
        death_timeout_seconds=args.death_timeout_seconds,
        task_timeout_seconds=args.task_timeout_seconds,
        memory_limit_bytes=args.memory_limit_bytes,
        curve_server_key=args.curve_server_key,
        curve_secret_key=args.curve_secret_key,
        garbage_collect_interval_seconds=args.garbage_collect_interval_seconds,
        trim_memory_threshold_bytes=args.trim_memory_threshold_bytes,
        hard_processor_suspend=args.hard_processor_suspend,
        event_loop=args.event_loop,
        io_threads=args.io_threads,
        logging_paths=tuple(args.logging_paths),
        logging_level=args.logging_level,
        logging_config_file=args.logging_config_file,
    )
    run_cluster(Cluster(template, names))


def run_cluster(cluster: Cluster) -> None:
    """Run until a signal, until every worker has exited, or until our parent (if we have one) is gone."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    parent = exit_with_parent_pid()
    cluster.start()
    try:
        while not stop.wait(0.2):
            if cluster.all_exited() or (parent is not None and os.getppid() != parent):
                break
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
