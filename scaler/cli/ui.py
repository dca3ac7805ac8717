"""`scaler_ui MONITOR_ADDRESS --port 8081`: a web page with the live state of a scheduler and its workers."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from types import FrameType
from typing import Sequence

from scaler.cli.common import make_parser, parse_command_line, start_logging
from scaler.ui.settings import UI
from scaler.ui.web import WebMonitor


def build_parser() -> argparse.ArgumentParser:
    return make_parser(
        "scaler_ui", "Serve a web page that shows a scheduler's monitor feed live: tasks, throughput, workers.", UI
    )


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
