"""`scaler_cluster -n N ADDRESS` (alias `scaler_worker`): run N workers and their store in the foreground."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
from typing import Sequence

from scaler.cli.common import (
    Setting,
    add_final_arguments,
    add_ignored_option,
    add_peer_curve_arguments,
    add_settings,
    check_curve_keys,
    config_from_arguments,
    make_parser,
    number_type,
    parse_command_line,
    start_logging,
    store_data_address,
)
from scaler.cluster.cluster import Cluster, default_worker_names
from scaler.cluster.store_settings import StoreSettings
from scaler.errors import ClusterStartError
from scaler.store.server_config import default_capacity_bytes
from scaler.utility.curve import PeerKeys
from scaler.utility.ignored_settings import (
    EVENT_LOOP,
    EVENT_LOOPS,
    GARBAGE_COLLECT_INTERVAL_SECONDS,
    HARD_PROCESSOR_SUSPEND,
    TRIM_MEMORY_THRESHOLD_BYTES,
)
from scaler.utility.parent_watch import exit_with_parent_pid, parent_is_gone
from scaler.utility.readiness import FAILED, REGISTERED, ReadinessReporter
from scaler.utility.setting_rules import BYTES_OR_OFF, POSITIVE_SECONDS, argument_type
from scaler.utility.tags import checked_tags
from scaler.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

# More workers than this on one machine is a typo, not a plan.
_MAX_WORKERS = 4096
# How often the workers are looked at once they have all reported (as Cluster.watch does before).
_WATCH_SECONDS = 0.2


_SETTINGS: list[Setting] = [
    ("task_queue_size", ("--per-worker-task-queue-size", "-wtqs"),
     "how many tasks each worker accepts at once (shown as 'free' in scaler_top)"),
    ("max_processors", ("--max-processors", "-mp"),
     "processes one worker may run: one serves while the others hold tasks waiting on nested tasks; "
     "a task that would need more fails with NestingLimitError instead of deadlocking"),
    ("heartbeat_interval_seconds", ("--heartbeat-interval", "-hi"), "seconds between heartbeats to the scheduler"),
    ("task_timeout_seconds", ("--task-timeout-seconds", "-tts"),
     "a task running longer is stopped, its processor replaced, and it fails with TaskTimeoutError (0 = no limit)"),
    ("memory_limit_bytes", ("--memory-limit-bytes", "-ml"),
     "a processor using more memory (RSS) is stopped before the OS kills it, and its task fails with "
     "MemoryLimitError (0 = no limit)"),
    ("input_wait_seconds", ("--input-wait-seconds",),
     "how long a task waits for a stored input (plus its size at 20 MB/s) before the worker reports it lost and "
     "gives the task back"),
    ("death_timeout_seconds", ("--death-timeout-seconds", "-ds"),
     "a worker that hears nothing from the scheduler this long exits: with an error if it never got a welcome"),
    ("io_threads", ("--io-threads", "-it"), "zmq io threads per worker"),
]


def build_parser() -> argparse.ArgumentParser:
    # Named as it was called: scaler_worker is the same command.
    called = os.path.basename(sys.argv[0]) if sys.argv else ""
    prog = called if called in ("scaler_cluster", "scaler_worker") else "scaler_cluster"
    parser = make_parser(prog, "Run Scaler workers on this machine.")

    parser.add_argument(
        "--num-of-workers", "-n", type=number_type(int, 1, _MAX_WORKERS), default=os.cpu_count() or 1,
        help="number of workers",
    )
    parser.add_argument(
        "--worker-names", "-wn", type=str, default=None,
        help="comma-separated worker names, one per worker; when not given, host name and index",
    )
    parser.add_argument(
        "--tags", type=str, default="", dest="tag_list",
        help="comma-separated capabilities of these workers, e.g. gpu,fast: tasks submitted with tags={'gpu'} run "
        "only on workers that have every tag they require (the workers always have 'python' too)",
    )
    add_settings(parser, WorkerConfig, _SETTINGS)
    add_ignored_option(
        parser, GARBAGE_COLLECT_INTERVAL_SECONDS, "--garbage-collect-interval-seconds", "-gc",
        type=argument_type(POSITIVE_SECONDS),
    )
    add_ignored_option(
        parser, TRIM_MEMORY_THRESHOLD_BYTES, "--trim-memory-threshold-bytes", "-tm", type=argument_type(BYTES_OR_OFF)
    )
    add_ignored_option(parser, HARD_PROCESSOR_SUSPEND, "--hard-processor-suspend", "-hps")
    add_store_arguments(parser)
    add_peer_curve_arguments(parser)
    add_ignored_option(parser, EVENT_LOOP, "--event-loop", "-el", choices=EVENT_LOOPS)
    add_final_arguments(parser, "scheduler address, e.g. tcp://127.0.0.1:2345")
    return parser


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """The store of this host's objects (PROTOCOL.md §17), started before the workers."""
    parser.add_argument(
        "--store-capacity-bytes", type=number_type(int, 0, 2**63 - 1), default=default_capacity_bytes(),
        help="bytes of objects the store keeps in memory; beyond, the least recently used spill to disk; "
        "the default is 30%% of this machine's memory",
    )
    parser.add_argument(
        "--data-address", type=store_data_address, default=None,
        help="where other hosts reach the store: tcp://HOST (a free port) or tcp://HOST:PORT; default: this "
        "host's address on the route to the scheduler",
    )
    parser.add_argument(
        "--no-store", dest="store", action="store_false", help="run the workers without a store",
    )
    parser.add_argument(
        "--no-borrowing", dest="store_borrowing", action="store_false",
        help="the store copies every object into its memory, never reading large bytes out of a client's",
    )


def store_settings(args: argparse.Namespace) -> StoreSettings | None:
    if not args.store:
        return None
    return StoreSettings(
        capacity_bytes=args.store_capacity_bytes, data_address=args.data_address, borrowing=args.store_borrowing,
    )


def main(argv: Sequence[str] | None = None) -> None:
    reporter = ReadinessReporter.from_environment()
    parser = build_parser()
    args = parse_command_line(parser, argv)
    if args.worker_names is None:
        names = default_worker_names(args.num_of_workers)
    else:
        names = [name.strip() for name in args.worker_names.split(",")]
        if len(names) != args.num_of_workers:
            parser.error(f"{len(names)} worker names given for {args.num_of_workers} workers")
        if not all(names):
            parser.error("argument --worker-names/-wn: a worker name is empty")
    check_curve_keys(parser, PeerKeys.resolve, args.curve_server_key, args.curve_secret_key)
    try:
        tags = checked_tags([tag.strip() for tag in args.tag_list.split(",")] if args.tag_list else [], "--tags")
    except (TypeError, ValueError) as error:
        parser.error(f"argument --tags: {error}")
    template = dataclasses.replace(config_from_arguments(WorkerConfig, args), tags=tags)
    start_logging(parser, args)
    sys.exit(run_cluster(Cluster(template, names, store=store_settings(args)), reporter))


def run_cluster(cluster: Cluster, reporter: ReadinessReporter | None = None) -> int:
    """Run until a signal, until every worker has exited, or until our parent (if we have one) is gone.

    Returns the exit status: 1 if the workers all exited by themselves and one of them failed (say, no
    scheduler answered within --death-timeout-seconds), else 0. A parent that started us with a
    readiness pipe hears once that every worker registered, or why one could not.
    """
    reporter = reporter or ReadinessReporter(None)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    parent = exit_with_parent_pid()
    everyone = len(cluster.worker_names)
    ended_by_itself = False
    try:
        cluster.launch()
    except ClusterStartError as error:
        logger.error(str(error))
        reporter.report(FAILED, str(error))
        reporter.close()
        cluster.shutdown()
        return 1
    try:
        while not stop.is_set():
            if cluster.reports_pending:
                cluster.watch()
            else:  # the pipe has nothing more to say: wait on the stop itself, which a signal ends at once
                stop.wait(_WATCH_SECONDS)
                cluster.watch(0.0)
            if reporter.active:
                problem = cluster.startup_problem()
                if cluster.registered_workers == everyone:
                    reporter.report(REGISTERED, f"{everyone} workers")
                    reporter.close()
                elif problem is not None:
                    reporter.report(FAILED, problem)
                    reporter.close()
            if cluster.all_exited():
                ended_by_itself = True
                break
            if parent_is_gone(parent):
                break
    finally:
        cluster.shutdown()
        reporter.close()
    if ended_by_itself and cluster.exitcode:
        logger.error(
            f"Cluster: every worker has exited, {cluster.failed_workers} of them with an error (see above); "
            "exiting with status 1"
        )
        return 1
    if ended_by_itself:
        logger.info("Cluster: every worker has exited")
    return 0


if __name__ == "__main__":
    main()
