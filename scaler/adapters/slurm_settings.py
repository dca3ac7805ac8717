"""`scaler_slurm_cluster`'s options (`[slurm_cluster]` in a config file): the one table of them."""

from __future__ import annotations

import argparse
import sys

from scaler.adapters.adaptive_scaler import DEFAULT_POLL_SECONDS
from scaler.adapters.scaling_policy import ScalingSettings
from scaler.adapters.slurm_jobs import JOB_NAME_PATTERN
from scaler.utility.option_table import REPEATED, Option, OptionTable
from scaler.utility.setting_rules import POSITIVE_SECONDS, Rule
from scaler.utility.shared_options import address_option, logging_options
from scaler.utility.text_rules import ADDRESS, TEXT, TextRule, read_word

MAX_WORKERS = 100_000


def read_job_name(text: str) -> str:
    if not JOB_NAME_PATTERN.match(text):
        raise argparse.ArgumentTypeError(f"must be 1-64 letters, digits, '_', '.' or '-', got {text!r}")
    return text


SLURM_CLUSTER = OptionTable(
    "slurm_cluster",
    (
        Option(
            "partition", None, TextRule("a Slurm partition", read_word("a partition name")),
            "the Slurm partition to submit to", flags=("-p",), required=True,
        ),
        Option(
            "max_workers", ScalingSettings.maximum_workers, Rule(int, 1, MAX_WORKERS), "never more workers than this",
        ),
        Option(
            "min_workers", ScalingSettings.minimum_workers, Rule(int, 0, MAX_WORKERS),
            "keep at least this many workers, even with nothing to do",
        ),
        Option(
            "idle_seconds", ScalingSettings.idle_seconds, POSITIVE_SECONDS,
            "a job whose workers held no task this long is cancelled",
        ),
        Option(
            "workers_per_job", 1, Rule(int, 1, 4096),
            "workers each job runs (scaler_cluster -n); jobs are started and cancelled whole",
        ),
        Option(
            "cpus_per_job", None, Rule(int, 1, 100_000), "CPUs each job asks for (sbatch --cpus-per-task)",
            default_text="one per worker",
        ),
        Option(
            "time_limit", None, TextRule("a Slurm time, e.g. 04:00:00", read_word("a time limit")),
            "sbatch --time, e.g. 04:00:00", metavar="TIME", default_text="the partition's",
        ),
        Option(
            "job_name", "scaler-worker", TextRule("1-64 letters, digits, '_', '.' or '-'", read_job_name),
            "sbatch --job-name; workers are named <job name>-<job id>|<index>", metavar="NAME",
        ),
        Option(
            "sbatch_option", [], TEXT,
            "one more sbatch option, e.g. --sbatch-option=--account=myproject (repeat for more)",
            form=REPEATED, metavar="OPTION",
        ),
        Option(
            "job_setup", [], TEXT,
            "a shell line each job runs before its workers, e.g. 'source /shared/venv/bin/activate' (repeat)",
            form=REPEATED, metavar="COMMAND",
        ),
        Option(
            "output", None, TEXT, "sbatch --output for the jobs' logs, e.g. /shared/logs/%x-%j.out",
            metavar="PATH", default_text="Slurm's slurm-%j.out",
        ),
        Option(
            "python", sys.executable, TEXT,
            "the Python the jobs run scaler_cluster with (it must have scaler installed on the nodes)",
            metavar="PATH", default_text="this Python",
        ),
        Option(
            "worker_options", "", TEXT,
            "scaler_cluster options for the workers, as one string, e.g. "
            "--worker-options='--per-worker-task-queue-size 100 --curve-server-key /shared/keys/scheduler.key'",
            metavar="OPTIONS",
        ),
        Option(
            "monitor_address", None, ADDRESS,
            "the scheduler's monitor address, where the load is read (readable on the scheduler's machine only)",
            flags=("-ma",), default_text="derived from the address as the scheduler does, e.g. "
            "ipc:///tmp/127.0.0.1_2345_monitor",
        ),
        Option(
            "poll_seconds", DEFAULT_POLL_SECONDS, POSITIVE_SECONDS, "how often squeue is asked what became of the jobs",
        ),
    ),
    logging_options(),
    (address_option("the scheduler's address as the nodes reach it, e.g. tcp://login1:2345"),),
)
