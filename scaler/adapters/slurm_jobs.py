"""What the Slurm adapter says to Slurm and how it reads the answers: pure text in, text out.

`sbatch` gets a job script that runs `scaler_cluster` with worker names made from the job id, so the
monitor feed shows which job each worker belongs to; `squeue` (and `sacct`, where accounting is on) say
what became of each job.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Mapping, Sequence

from scaler.adapters.worker_adapter import GroupState

# A job name goes into worker names and a shell script: keep it to characters that need no quoting.
JOB_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

# Slurm's job states (squeue %T, sacct State), as a group's state. Anything not listed here has ended.
_WAITING_STATES = {
    "PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "RESIZING",
}
_RUNNING_STATES = {
    "RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED", "UPDATE_DB", "POWER_UP_NODE",
}


@dataclasses.dataclass(frozen=True)
class SlurmJobSpec:
    """One worker group as a batch job: `workers_per_job` workers on one node, `cpus_per_job` CPUs."""

    address: str  # the scheduler's address, as the nodes reach it
    partition: str
    workers_per_job: int = 1
    cpus_per_job: int | None = None  # default: one per worker
    time_limit: str | None = None  # sbatch --time, e.g. "01:00:00"; default: the partition's
    job_name: str = "scaler-worker"
    output: str | None = None  # sbatch --output pattern; default: Slurm's (slurm-%j.out in the working directory)
    sbatch_options: tuple[str, ...] = ()  # more sbatch options, e.g. ("--account=proj", "--qos=low")
    setup_commands: tuple[str, ...] = ()  # shell lines run before the workers (module load, venv activate)
    python: str = "python3"  # the interpreter the nodes run scaler_cluster with
    worker_arguments: tuple[str, ...] = ()  # more scaler_cluster options

    def __post_init__(self) -> None:
        if not self.partition:
            raise ValueError("a Slurm partition is needed (--partition)")
        if not JOB_NAME_PATTERN.match(self.job_name):
            raise ValueError(f"job name must be 1-64 letters, digits, '_', '.' or '-', got {self.job_name!r}")
        for name in ("workers_per_job", "cpus_per_job"):
            value = getattr(self, name)
            if value is None and name == "cpus_per_job":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")

    def sbatch_command(self) -> list[str]:
        """sbatch reading the script from its standard input; it prints the job id (--parsable)."""
        command = [
            "sbatch", "--parsable", f"--job-name={self.job_name}", f"--partition={self.partition}",
            "--nodes=1", "--ntasks=1", f"--cpus-per-task={self.cpus_per_job or self.workers_per_job}",
            # A preempted job must end, not come back under the same id unknown to us: the policy starts another.
            "--no-requeue",
        ]
        if self.time_limit:
            command.append(f"--time={self.time_limit}")
        if self.output:
            command.append(f"--output={self.output}")
        command.extend(self.sbatch_options)
        return command

    def job_script(self) -> str:
        names = ",".join(f"{self.job_name}-${{SLURM_JOB_ID}}|{index}" for index in range(self.workers_per_job))
        cluster = " ".join(shlex.quote(part) for part in (
            self.python, "-m", "scaler.cli.cluster", "-n", str(self.workers_per_job), *self.worker_arguments,
        ))
        lines = [
            "#!/bin/sh",
            f"# Scaler workers for the scheduler at {self.address}, started by scaler_slurm_cluster.",
            *self.setup_commands,
            f'exec {cluster} --worker-names "{names}" {shlex.quote(self.address)}',
        ]
        return "\n".join(lines) + "\n"

    def worker_names(self, job_id: str) -> tuple[str, ...]:
        """The names the job's workers register with (what job_script makes of $SLURM_JOB_ID)."""
        return tuple(f"{self.job_name}-{job_id}|{index}" for index in range(self.workers_per_job))

    def squeue_command(self, user: str) -> list[str]:
        """Our jobs in every state slurmctld still remembers (finished ones for MinJobAge, 300 s by default)."""
        return [
            "squeue", "--noheader", "--states=all", f"--name={self.job_name}", f"--user={user}",
            "--format=%i|%T|%r",
        ]


def sacct_command(job_ids: Sequence[str]) -> list[str]:
    """What accounting says of jobs squeue no longer shows (fails where accounting is off)."""
    return [
        "sacct", "--noheader", "--parsable2", "--allocations", "--format=JobID,State", f"--jobs={','.join(job_ids)}",
    ]


def parse_job_id(sbatch_output: str) -> str:
    """sbatch --parsable prints `<id>` or `<id>;<cluster>`."""
    text = sbatch_output.strip().splitlines()[-1] if sbatch_output.strip() else ""
    job_id = text.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"sbatch printed no job id: {sbatch_output.strip()!r}")
    return job_id


def parse_squeue(output: str) -> dict[str, tuple[str, str]]:
    """`squeue --format=%i|%T|%r` lines as {job id: (state, reason)}; the reason is "None" when there is none."""
    jobs = {}
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            jobs[parts[0]] = (parts[1].strip().upper(), parts[2].strip() if len(parts) > 2 else "")
    return jobs


def parse_sacct(output: str) -> dict[str, str]:
    """`sacct --parsable2 --format=JobID,State` lines as {job id: state} ("CANCELLED by 0" becomes "CANCELLED")."""
    states = {}
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0] and parts[1]:
            states[parts[0]] = parts[1].split()[0].upper()
    return states


def group_state(slurm_state: str) -> GroupState:
    state = slurm_state.split()[0].upper() if slurm_state.strip() else ""
    if state in _WAITING_STATES:
        return GroupState.PENDING
    if state in _RUNNING_STATES:
        return GroupState.RUNNING
    return GroupState.ENDED


def job_detail(state: str, reason: str) -> str:
    """How a job's state reads in a log line: "PENDING (Resources)", "TIMEOUT", ..."""
    return f"{state} ({reason})" if reason and reason != "None" else state


def sbatch_environment(environment: Mapping[str, str], drop: Sequence[str]) -> dict[str, str]:
    """What sbatch exports to the job (--export=ALL): ours, less what ties a process to this one."""
    return {key: value for key, value in environment.items() if key not in drop}
