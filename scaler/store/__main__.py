"""`python -m scaler.store`: one store process, the data plane of one host (started before its workers).

Once it listens it tells the parent that started it, over the readiness pipe: `listening DATA_ADDRESS
IPC_ADDRESS HOST_KEY`. It exits on SIGINT or SIGTERM, or when the parent named by SCALER_EXIT_WITH_PARENT
is gone, and leaves nothing behind: its segments are memfds and its spill files are unlinked.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any, Callable, Sequence

import psutil

from scaler.cli.common import add_logging_arguments, existing_directory, start_logging
from scaler.store.scheduler_link import StoreIdentity
from scaler.store.server import StoreServerConfig, StoreStartError, run_store, tcp_bind_address
from scaler.utility.logging_setup import logging_path_problem
from scaler.utility.parent_watch import exit_with_parent_pid
from scaler.utility.readiness import FAILED, LISTENING, ReadinessReporter

logger = logging.getLogger(__name__)

DEFAULT_CAPACITY_FRACTION = 0.3


def default_capacity_bytes() -> int:
    return int(psutil.virtual_memory().total * DEFAULT_CAPACITY_FRACTION)


def _data_address(text: str) -> str:
    try:
        tcp_bind_address(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _non_negative(kind: type) -> Callable[[str], Any]:
    def check(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} is negative")
        return value

    return check


def _host_key(text: str) -> str:
    if not text or any(character.isspace() for character in text):
        raise argparse.ArgumentTypeError(f"{text!r}: a host key is one word, e.g. BOOT_ID/NETNS_INODE")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        "python -m scaler.store", description="A Scaler object store: shared memory for this host, tcp for others.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--data-address", type=_data_address, default="tcp://127.0.0.1",
        help="where other hosts reach this store: tcp://HOST (a free port) or tcp://HOST:PORT",
    )
    parser.add_argument(
        "--capacity-bytes", type=_non_negative(int), default=None,
        help="bytes of objects held in memory; beyond, the least recently used go to disk (default: 30%% of RAM)",
    )
    parser.add_argument(
        "--spill-directory", type=existing_directory, default=None,
        help="where objects beyond the capacity go (unlinked files); default: the system's temporary directory",
    )
    parser.add_argument(
        "--host-key", type=_host_key, default=None,
        help="which processes share memory with this store (default: this host's boot id and network namespace)",
    )
    parser.add_argument(
        "--pool-idle-seconds", type=_non_negative(float), default=30.0,
        help="free a recycled segment unused for this long",
    )
    add_logging_arguments(parser)
    return parser


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
    )

    def on_listening(identity: StoreIdentity) -> None:
        reporter.report(LISTENING, f"{identity.data_address} {identity.ipc_address} {identity.host_key}")
        reporter.close()

    try:
        run_store(config, exit_with_parent=exit_with_parent_pid(), on_listening=on_listening)
    except StoreStartError as error:
        logger.error(str(error))
        reporter.report(FAILED, str(error))
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
