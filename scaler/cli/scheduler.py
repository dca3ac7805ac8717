"""`scaler_scheduler ADDRESS`: run a scheduler in the foreground."""

from __future__ import annotations

import argparse
from typing import Sequence

from scaler.cli.common import check_curve_keys, make_parser, parse_command_line, start_logging
from scaler.protocol.versions import INSTALLED, Speaks
from scaler.scheduler.config import SchedulerConfig
from scaler.scheduler.settings import SCHEDULER
from scaler.utility.curve import ServerKeys
from scaler.utility.parent_watch import exit_with_parent_pid
from scaler.utility.readiness import ReadinessReporter


def build_parser() -> argparse.ArgumentParser:
    return make_parser("scaler_scheduler", "Run a Scaler scheduler.", SCHEDULER)


def main(argv: Sequence[str] | None = None, speaks: Speaks = INSTALLED) -> None:
    """`speaks`: the release and protocol version the scheduler says it is; only a program calling this (a test
    of an upgrade, playing another release) sets it: the command line has no option for it."""
    reporter = ReadinessReporter.from_environment()
    parser = build_parser()
    args = parse_command_line(parser, argv)
    check_curve_keys(parser, ServerKeys.resolve, args.curve_secret_key, args.curve_authorized_keys)
    config = SchedulerConfig(**SCHEDULER.config_values(SchedulerConfig, args))
    start_logging(parser, args)
    # The server (its core, the protocol's codec) is imported once the command line is known good: a
    # mistyped option is answered in the time Python takes to start, not after the whole scheduler's imports.
    from scaler.scheduler.server import run_scheduler

    run_scheduler(
        config, exit_with_parent=exit_with_parent_pid(), reporter=reporter if reporter.active else None, speaks=speaks
    )


if __name__ == "__main__":
    main()
