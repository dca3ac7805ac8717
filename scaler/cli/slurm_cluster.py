"""`scaler_slurm_cluster ADDRESS --partition P --max-workers N`: Scaler workers as Slurm jobs, as many as the
load wants."""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
from typing import Sequence

from scaler.adapters.adaptive_scaler import DEFAULT_POLL_SECONDS, AdaptiveScaler
from scaler.adapters.scaling_policy import ScalingSettings
from scaler.adapters.slurm import SlurmAdapter
from scaler.adapters.slurm_jobs import JOB_NAME_PATTERN, SlurmJobSpec
from scaler.cli.common import (
    add_address_argument,
    add_logging_arguments,
    make_parser,
    number_type,
    parse_command_line,
    start_logging,
    zmq_address,
)
from scaler.scheduler.config import default_monitor_address
from scaler.utility.setting_rules import POSITIVE_SECONDS, argument_type

logger = logging.getLogger(__name__)

_MAX_WORKERS = 100_000


def job_name(text: str) -> str:
    if not JOB_NAME_PATTERN.match(text):
        raise argparse.ArgumentTypeError(f"must be 1-64 letters, digits, '_', '.' or '-', got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "scaler_slurm_cluster",
        "Run Scaler workers as Slurm batch jobs: submitted (sbatch) while tasks wait, up to --max-workers, "
        "and cancelled (scancel) once idle for --idle-seconds, down to --min-workers. Run it where sbatch "
        "works (a login node); the jobs' nodes must reach the scheduler's address.",
    )
    count = number_type(int, 0, _MAX_WORKERS)
    parser.add_argument("--partition", "-p", required=True, help="the Slurm partition to submit to")
    parser.add_argument(
        "--max-workers", type=number_type(int, 1, _MAX_WORKERS), default=ScalingSettings.maximum_workers,
        help="never more workers than this",
    )
    parser.add_argument(
        "--min-workers", type=count, default=ScalingSettings.minimum_workers,
        help="keep at least this many workers, even with nothing to do",
    )
    parser.add_argument(
        "--idle-seconds", type=argument_type(POSITIVE_SECONDS), default=ScalingSettings.idle_seconds,
        help="a job whose workers held no task this long is cancelled",
    )
    parser.add_argument(
        "--workers-per-job", type=number_type(int, 1, 4096), default=1,
        help="workers each job runs (scaler_cluster -n); jobs are started and cancelled whole",
    )
    parser.add_argument(
        "--cpus-per-job", type=number_type(int, 1, 100_000), default=None,
        help="CPUs each job asks for (sbatch --cpus-per-task); default: one per worker",
    )
    parser.add_argument("--time-limit", default=None, help="sbatch --time, e.g. 04:00:00; default: the partition's")
    parser.add_argument(
        "--job-name", type=job_name, default="scaler-worker",
        help="sbatch --job-name; workers are named <job name>-<job id>|<index>",
    )
    parser.add_argument(
        "--sbatch-option", action="append", default=[], metavar="OPTION",
        help="one more sbatch option, e.g. --sbatch-option=--account=myproject (repeat for more)",
    )
    parser.add_argument(
        "--job-setup", action="append", default=[], metavar="COMMAND",
        help="a shell line each job runs before its workers, e.g. 'source /shared/venv/bin/activate' (repeat)",
    )
    parser.add_argument(
        "--output", default=None,
        help="sbatch --output for the jobs' logs, e.g. /shared/logs/%%x-%%j.out; default: Slurm's slurm-%%j.out",
    )
    parser.add_argument(
        "--python", default=sys.executable,
        help="the Python the jobs run scaler_cluster with (it must have scaler installed on the nodes)",
    )
    parser.add_argument(
        "--worker-options", default="", metavar="OPTIONS",
        help="scaler_cluster options for the workers, as one string, e.g. "
        "--worker-options='--per-worker-task-queue-size 100 --curve-server-key /shared/keys/scheduler.key'",
    )
    parser.add_argument(
        "--monitor-address", "-ma", type=zmq_address, default=None,
        help="the scheduler's monitor address, where the load is read; default derived from the address as the "
        "scheduler does, e.g. ipc:///tmp/127.0.0.1_2345_monitor (readable on the scheduler's machine only)",
    )
    parser.add_argument(
        "--poll-seconds", type=argument_type(POSITIVE_SECONDS), default=DEFAULT_POLL_SECONDS,
        help="how often squeue is asked what became of the jobs",
    )
    add_logging_arguments(parser)
    add_address_argument(parser, "the scheduler's address as the nodes reach it, e.g. tcp://login1:2345")
    return parser


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
