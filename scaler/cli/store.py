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
from typing import Any, Callable, Sequence

from scaler.cli.common import add_logging_arguments, existing_directory, start_logging, store_data_address
from scaler.store.control_link import ControlLink
from scaler.store.scheduler_link import StoreIdentity
from scaler.store.server import run_store
from scaler.store.server_config import StoreServerConfig, StoreStartError, default_capacity_bytes
from scaler.utility.curve import PeerKeys
from scaler.utility.logging_setup import logging_path_problem
from scaler.utility.parent_watch import exit_with_parent_pid
from scaler.utility.readiness import FAILED, LISTENING, ReadinessReporter

logger = logging.getLogger(__name__)

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
        "python -m scaler.cli.store", description="A Scaler object store: shared memory for this host, tcp for others.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--data-address", type=store_data_address, default="tcp://127.0.0.1",
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
    parser.add_argument(
        "--no-borrowing", dest="borrowing", action="store_false",
        help="copy every local writer's object into shared memory, never read it from the writer's own memory "
        "(process_vm_readv); a store that cannot read a writer's memory falls back to copying by itself",
    )
    parser.add_argument(
        "--scheduler-address", default=None,
        help="the scheduler to register with (tcp://HOST:PORT); default: none, a standalone store",
    )
    parser.add_argument("--name", default="", help="shown in the scheduler's log and monitor")
    parser.add_argument(
        "--heartbeat-interval-seconds", type=_positive_seconds, default=2.0, help="how often to heartbeat",
    )
    parser.add_argument(
        "--death-timeout-seconds", type=_positive_seconds, default=300.0,
        help="stop after hearing nothing from the scheduler for this long",
    )
    parser.add_argument("--curve-server-key", default=None, help="the scheduler's CURVE public key file")
    parser.add_argument("--curve-secret-key", default=None, help="this store's CURVE secret key file")
    add_logging_arguments(parser)
    return parser


def _positive_seconds(text: str) -> float:
    value = _non_negative(float)(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not more than 0")
    return value


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
        run_store(config, exit_with_parent=exit_with_parent_pid(), on_listening=on_listening, link=link)
    except StoreStartError as error:
        logger.error(str(error))
        reporter.report(FAILED, str(error))
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
