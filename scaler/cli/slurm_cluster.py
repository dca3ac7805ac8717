"""`scaler_slurm_cluster ADDRESS --partition P --max-workers N`: Scaler workers as Slurm jobs, as many as the
load wants."""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
from typing import Sequence

from scaler.adapters.adaptive_scaler import AdaptiveScaler
from scaler.adapters.slurm import SlurmAdapter
from scaler.adapters.slurm_jobs import SlurmJobSpec
from scaler.adapters.slurm_settings import SLURM_CLUSTER
from scaler.cli.common import make_parser, parse_command_line, start_logging
from scaler.scheduler.config import default_monitor_address

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    return make_parser(
        "scaler_slurm_cluster",
        "Run Scaler workers as Slurm batch jobs: submitted (sbatch) while tasks wait, up to --max-workers, "
        "and cancelled (scancel) once idle for --idle-seconds, down to --min-workers. Run it where sbatch "
        "works (a login node); the jobs' nodes must reach the scheduler's address.",
        SLURM_CLUSTER,
    )


def worker_arguments(parser: argparse.ArgumentParser, text: str, address: str) -> list[str]:
    """The --worker-options, checked now by scaler_cluster's own parser: a typo fails here, not in every job."""
    from scaler.cli.cluster import build_parser as cluster_parser

    try:
        arguments = shlex.split(text)
    except ValueError as error:
        parser.error(f"argument --worker-options: {error}")
    for taken in ("-n", "--num-of-workers", "-wn", "--worker-names"):
        if taken in arguments or any(argument.startswith(f"{taken}=") for argument in arguments):
            parser.error(f"argument --worker-options: {taken} is set by scaler_slurm_cluster (see --workers-per-job)")
    checker = cluster_parser()

    def refuse(message: str) -> None:
        raise ValueError(message)

    checker.error = refuse  # type: ignore[method-assign,assignment]
    try:
        checker.parse_args([*arguments, address])
    except ValueError as error:
        parser.error(f"argument --worker-options: {error}")
    return arguments


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parse_command_line(parser, argv)
    if args.min_workers > args.max_workers:
        parser.error(f"--min-workers ({args.min_workers}) is above --max-workers ({args.max_workers})")
    spec = SlurmJobSpec(
        address=args.address,
        partition=args.partition,
        workers_per_job=args.workers_per_job,
        cpus_per_job=args.cpus_per_job,
        time_limit=args.time_limit,
        job_name=args.job_name,
        output=args.output,
        sbatch_options=tuple(args.sbatch_option),
        setup_commands=tuple(args.job_setup),
        python=args.python,
        worker_arguments=tuple(worker_arguments(parser, args.worker_options, args.address)),
    )
    start_logging(parser, args)
    try:
        adapter = SlurmAdapter(spec)
    except FileNotFoundError as error:
        logger.error(f"scaler_slurm_cluster: {error}")
        sys.exit(1)
    scaler = AdaptiveScaler(
        adapter,
        args.monitor_address or default_monitor_address(args.address),
        minimum_workers=args.min_workers,
        maximum_workers=args.max_workers,
        idle_seconds=args.idle_seconds,
        poll_seconds=args.poll_seconds,
        scheduler_address=args.address,  # to drain a job's workers before cancelling it
    )
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: scaler.stop())
    try:
        scaler.run()
    finally:
        scaler.close()  # cancels every job it submitted: nothing keeps running for a scaler that is gone
    logger.info("scaler_slurm_cluster: stopped")


if __name__ == "__main__":
    main()
