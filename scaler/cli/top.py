"""`scaler_top MONITOR_ADDRESS`: a top-like terminal view of a scheduler and its workers."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from scaler.ui.settings import TOP
from scaler.utility.command_parser import parser_for


def build_parser() -> argparse.ArgumentParser:
    return parser_for(
        TOP,
        "scaler_top",
        "Show a scheduler's monitor feed like top: tasks, messages and workers, refreshed every second. "
        "Keys: n C M c m f w d l sort the worker table (see the Shortcuts line), q or Ctrl-C quits.",
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        sys.exit("scaler_top needs a terminal; run it in one (or in tmux/screen)")
    # Anything printed would land in the middle of the drawn screen.
    logging.getLogger().addHandler(logging.NullHandler())
    logging.getLogger().setLevel(logging.CRITICAL)

    from scaler.ui.top import run_top

    sys.exit(run_top(args.address))


if __name__ == "__main__":
    main()
