"""`scaler_symphony_cluster ADDRESS SERVICE --base-concurrency N`: one Scaler worker whose tasks run on an
IBM Spectrum Symphony service (document 004)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from scaler.adapters.symphony.sdk import SymphonySdkMissing, load_soamapi
from scaler.cli.common import (
    Setting,
    add_final_arguments,
    add_ignored_option,
    add_peer_curve_arguments,
    add_settings,
    check_curve_keys,
    make_parser,
    parse_command_line,
    start_logging,
)
from scaler.utility.curve import PeerKeys
from scaler.utility.ignored_settings import EVENT_LOOP, EVENT_LOOPS

# Read from the environment, not the command line, where every user of the machine could see it.
PASSWORD_ENVIRONMENT_VARIABLE = "SCALER_SYMPHONY_PASSWORD"


_SETTINGS: list[Setting] = [
    ("base_concurrency", ("--base-concurrency", "-n"),
     "how many unnested tasks run in Symphony at once; nested tasks go beyond it. With nested tasks, keep it "
     "below the cores of the Symphony workers, e.g. cores minus the deepest nesting level, or tasks waiting "
     "on nested ones can take every core and deadlock"),
    ("task_queue_size", ("--per-worker-task-queue-size", "-wtqs"),
     "how many tasks the worker accepts at once (those beyond what runs wait here, or move to other workers "
     "when the scheduler balances)"),
    ("heartbeat_interval_seconds", ("--heartbeat-interval", "-hi"), "seconds between heartbeats"),
    ("death_timeout_seconds", ("--death-timeout-seconds", "-ds"),
     "exit after hearing nothing from the scheduler this long"),
]


def build_parser() -> argparse.ArgumentParser:
    from scaler.adapters.symphony.worker import SymphonyWorkerConfig

    parser = make_parser(
        "scaler_symphony_cluster",
        "Run one Scaler worker that sends its tasks to an IBM Spectrum Symphony service (see "
        "examples/symphony/scaler_service.py for the service to deploy). Needs IBM's soamapi Python SDK.",
    )
    parser.usage = "scaler_symphony_cluster [options] address service"

    add_settings(parser, SymphonyWorkerConfig, _SETTINGS)
    parser.add_argument(
        "--worker-name", "-w", default="", help="the worker's name at the scheduler; default symphony|HOST|PID",
    )
    add_peer_curve_arguments(parser)
    parser.add_argument(
        "--symphony-user", default="Guest",
        help=f"the Symphony user to connect as; the password is read from {PASSWORD_ENVIRONMENT_VARIABLE} "
        "(default Guest)",
    )
    parser.add_argument(
        "--session-type", default=None, help="a session type of the application's profile; default: its own",
    )
    add_ignored_option(parser, EVENT_LOOP, "--event-loop", "-el", choices=EVENT_LOOPS)
    add_final_arguments(parser, "scheduler address, e.g. tcp://127.0.0.1:2345")
    parser.add_argument("service", help="the Symphony application whose service runs the tasks, e.g. ScalerService")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    from scaler.adapters.symphony.worker import SymphonyWorkerConfig, run_symphony_worker

    parser = build_parser()
    args = parse_command_line(parser, argv)
    try:
        load_soamapi()
    except SymphonySdkMissing as error:
        parser.exit(1, f"{parser.prog}: error: {error}\n")
    check_curve_keys(parser, PeerKeys.resolve, args.curve_server_key, args.curve_secret_key)
    try:
        config = SymphonyWorkerConfig(
            address=args.address,
            service=args.service,
            base_concurrency=args.base_concurrency,
            name=args.worker_name,
            task_queue_size=args.task_queue_size,
            heartbeat_interval_seconds=args.heartbeat_interval_seconds,
            death_timeout_seconds=args.death_timeout_seconds,
            curve_server_key=args.curve_server_key,
            curve_secret_key=args.curve_secret_key,
            symphony_user=args.symphony_user,
            symphony_password=os.environ.get(PASSWORD_ENVIRONMENT_VARIABLE, "Guest"),
            session_type=args.session_type,
        )
    except ValueError as error:
        parser.error(str(error))
    start_logging(parser, args)
    sys.exit(run_symphony_worker(config))


if __name__ == "__main__":
    main()
