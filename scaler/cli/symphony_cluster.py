"""`scaler_symphony_cluster ADDRESS SERVICE --base-concurrency N`: one Scaler worker whose tasks run on an
IBM Spectrum Symphony service (document 004)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from scaler.adapters.symphony.sdk import SymphonySdkMissing, load_soamapi
from scaler.adapters.symphony.settings import PASSWORD_ENVIRONMENT_VARIABLE, SYMPHONY_CLUSTER
from scaler.cli.common import check_curve_keys, make_parser, parse_command_line, start_logging
from scaler.utility.curve import PeerKeys

__all__ = ["PASSWORD_ENVIRONMENT_VARIABLE", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    return make_parser(
        "scaler_symphony_cluster",
        "Run one Scaler worker that sends its tasks to an IBM Spectrum Symphony service (see "
        "examples/symphony/scaler_service.py for the service to deploy). Needs IBM's soamapi Python SDK.",
        SYMPHONY_CLUSTER,
    )


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
            **SYMPHONY_CLUSTER.config_values(SymphonyWorkerConfig, args),
            symphony_password=os.environ.get(PASSWORD_ENVIRONMENT_VARIABLE, "Guest"),
        )
    except ValueError as error:
        parser.error(str(error))
    start_logging(parser, args)
    sys.exit(run_symphony_worker(config))


if __name__ == "__main__":
    main()
