"""Pieces shared by the console scripts."""

from __future__ import annotations

import argparse
import os

from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS, LOGGING_LEVELS

# Set by SchedulerClusterCombo and Cluster on the processes they start: exit when that parent is gone.
EXIT_WITH_PARENT_ENV = "SCALER_EXIT_WITH_PARENT"


def exit_with_parent_pid() -> int | None:
    value = os.environ.get(EXIT_WITH_PARENT_ENV)
    return int(value) if value else None


def zmq_address(text: str) -> str:
    scheme, separator, rest = text.partition("://")
    if not separator or scheme not in ("tcp", "ipc", "inproc") or not rest:
        raise argparse.ArgumentTypeError(f"{text!r} is not a ZeroMQ address such as tcp://127.0.0.1:2345 or ipc:///tmp/s")
    if scheme == "tcp":
        host, colon, port = rest.rpartition(":")
        if not colon or not host or not port.isdigit():
            raise argparse.ArgumentTypeError(f"{text!r}: a tcp address needs a host and a port, e.g. tcp://127.0.0.1:2345")
    return text


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--logging-paths", "-lp", nargs="*", type=str, default=DEFAULT_LOGGING_PATHS,
        help="where to write the log; several paths allowed; /dev/stdout and /dev/stderr are the terminal",
    )
    parser.add_argument(
        "--logging-level", "-ll", type=str.upper, choices=LOGGING_LEVELS, default="INFO", help="logging level"
    )
    parser.add_argument(
        "--logging-config-file", "-lc", type=str, default=None,
        help="a Python logging .conf file (logging.config.fileConfig format); overrides the two options above",
    )


def add_event_loop_argument(parser: argparse.ArgumentParser, *flags: str) -> None:
    parser.add_argument(
        *flags, default="builtin", choices=("builtin", "uvloop"),
        help="accepted for compatibility with Scaler 1.9.x; the I/O loop is a zmq poller either way",
    )
