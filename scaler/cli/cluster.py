"""`scaler_cluster -n N ADDRESS` (alias `scaler_worker`): run N workers and their store in the foreground."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Sequence

from scaler.cli.common import check_curve_keys, make_parser, parse_command_line, start_logging
from scaler.cluster.cluster import Cluster, default_worker_names
from scaler.cluster.settings import CLUSTER
from scaler.cluster.store_settings import StoreSettings
from scaler.errors import ClusterStartError
from scaler.utility.curve import PeerKeys
from scaler.utility.parent_watch import exit_with_parent_pid, parent_is_gone
from scaler.utility.readiness import FAILED, REGISTERED, ReadinessReporter
from scaler.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

# How often the workers are looked at once they have all reported (as Cluster.watch does before).
_WATCH_SECONDS = 0.2


def build_parser() -> argparse.ArgumentParser:
    # Named as it was called: scaler_worker is the same command.
    called = os.path.basename(sys.argv[0]) if sys.argv else ""
    prog = called if called in ("scaler_cluster", "scaler_worker") else "scaler_cluster"
    return make_parser(prog, "Run Scaler workers on this machine.", CLUSTER)


def store_settings(args: argparse.Namespace) -> StoreSettings | None:
    if not args.store:
        return None
    return StoreSettings(**CLUSTER.config_values(StoreSettings, args))


def main(argv: Sequence[str] | None = None) -> None:
    reporter = ReadinessReporter.from_environment()
    parser = build_parser()
    args = parse_command_line(parser, argv)
    if args.worker_names is None:
        names = default_worker_names(args.num_of_workers)
    else:
        names = list(args.worker_names)
        if len(names) != args.num_of_workers:
            parser.error(f"{len(names)} worker names given for {args.num_of_workers} workers")
    check_curve_keys(parser, PeerKeys.resolve, args.curve_server_key, args.curve_secret_key)
    template = WorkerConfig(**CLUSTER.config_values(WorkerConfig, args))
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
