"""`scaler_ui MONITOR_ADDRESS --port 8081`: a web page with the live state of a scheduler and its workers."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from types import FrameType
from typing import Sequence

from scaler.cli.common import (
    add_address_argument,
    add_logging_arguments,
    make_parser,
    number_type,
    parse_command_line,
    start_logging,
)
from scaler.ui.web import WebMonitor


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "scaler_ui", "Serve a web page that shows a scheduler's monitor feed live: tasks, throughput, workers."
    )
    add_address_argument(
        parser,
        "the scheduler's monitor address, printed by the scheduler on startup, e.g. ipc:///tmp/127.0.0.1_2345_monitor",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", type=_host,
        help="interface to serve on; the page has no authentication, so widen it (e.g. 0.0.0.0) with care",
    )
    parser.add_argument(
        "--port", type=number_type(int, 0, 65535), default=8081, help="port to serve on (0: any free port)"
    )
    add_logging_arguments(parser)
    return parser


def _host(text: str) -> str:
    if not text or text != text.strip() or "/" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a host name or address, e.g. 127.0.0.1 or 0.0.0.0")
    return text


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parse_command_line(parser, argv)
    start_logging(parser, args)
    logger = logging.getLogger("scaler.ui")
    try:
        monitor = WebMonitor(args.address, host=args.host, port=args.port)
    except OSError as error:
        sys.exit(f"scaler_ui: cannot serve on {args.host}:{args.port}: {error}; choose another port with --port")

    def stop_on_signal(signum: int, frame: FrameType | None) -> None:
        monitor.stopping.set()

    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    monitor.start()
    logger.info(f"scaler_ui: serving {monitor.url} for the monitor feed at {args.address} (Ctrl-C to stop)")
    try:
        while not monitor.stopping.wait(0.5):
            pass
    finally:
        monitor.stop()
        logger.info("scaler_ui: stopped")


if __name__ == "__main__":
    main()
