"""`python -m scaler.cli.store`: one store process, the data plane of one host (started before its workers).

With `--scheduler-address` it is a peer of that scheduler (role `store`, PROTOCOL.md §17); without,
a standalone store that local processes order deletes from themselves.

Once it listens it tells the parent that started it, over the readiness pipe: `listening DATA_ADDRESS
IPC_ADDRESS HOST_KEY`. It exits on SIGINT or SIGTERM, or when the parent named by SCALER_EXIT_WITH_PARENT
is gone, and leaves nothing behind: its segments are memfds and its spill files are unlinked.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Sequence

import psutil

from scaler.store.control_link import ControlLink
from scaler.store.scheduler_link import StoreIdentity
from scaler.store.server import run_store
from scaler.store.server_config import StoreServerConfig, StoreStartError
from scaler.store.settings import STORE
from scaler.utility.command_logging import start_logging
from scaler.utility.command_parser import parser_for
from scaler.utility.curve import PeerKeys
from scaler.utility.logging_setup import logging_path_problem
from scaler.utility.parent_watch import exit_with_parent_pid
from scaler.utility.readiness import FAILED, LISTENING, ReadinessReporter

logger = logging.getLogger(__name__)

# Of this machine's memory, what a store keeps in memory by default before it spills to disk. (Here, not in
# server_config.py, which a cluster's process imports too: psutil would be its only use of that package.)
DEFAULT_CAPACITY_FRACTION = 0.3


def default_capacity_bytes() -> int:
    return int(psutil.virtual_memory().total * DEFAULT_CAPACITY_FRACTION)


def build_parser() -> argparse.ArgumentParser:
    return parser_for(
        STORE, "python -m scaler.cli.store", "A Scaler object store: shared memory for this host, tcp for others."
    )


def main(argv: Sequence[str] | None = None) -> None:
    reporter = ReadinessReporter.from_environment()
    parser = build_parser()
    args = parser.parse_args(argv)
    for path in args.logging_paths:
        problem = logging_path_problem(path)
        if problem:
            parser.error(f"argument --logging-paths/-lp: {problem}")
    start_logging(parser, args)
    config = StoreServerConfig(
        capacity_bytes=args.capacity_bytes if args.capacity_bytes is not None else default_capacity_bytes(),
        data_address=args.data_address,
        spill_directory=args.spill_directory or "",
        host_key=args.host_key or "",
        pool_idle_seconds=args.pool_idle_seconds,
        borrowing=args.borrowing,
    )

    link = None
    if args.scheduler_address:
        try:
            keys = PeerKeys.resolve(args.curve_server_key, args.curve_secret_key)
        except ValueError as error:
            parser.error(str(error))
        link = ControlLink(
            args.scheduler_address, args.name or f"store|{os.getpid()}", keys,
            heartbeat_interval_seconds=args.heartbeat_interval_seconds,
            death_timeout_seconds=args.death_timeout_seconds,
        )

    def on_listening(identity: StoreIdentity) -> None:
        reporter.report(LISTENING, f"{identity.data_address} {identity.ipc_address} {identity.host_key}")
        reporter.close()

    try:
        failed = run_store(config, exit_with_parent=exit_with_parent_pid(), on_listening=on_listening, link=link)
    except StoreStartError as error:
        logger.error(str(error))
        reporter.report(FAILED, str(error))
        raise SystemExit(1) from None
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
