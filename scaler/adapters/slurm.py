"""SlurmAdapter: worker groups as Slurm batch jobs, through `sbatch`, `scancel`, `squeue` and `sacct`."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
from typing import Iterable, Sequence

from scaler.adapters.slurm_jobs import (
    SlurmJobSpec,
    group_state,
    job_detail,
    parse_job_id,
    parse_sacct,
    parse_squeue,
    sacct_command,
    sbatch_environment,
)
from scaler.adapters.worker_adapter import GroupState, WorkerAdapter, WorkerGroup
from scaler.utility.parent_watch import EXIT_WITH_PARENT_ENV
from scaler.utility.readiness import READY_FD_ENV

logger = logging.getLogger(__name__)

# Slurm's tools answer within seconds unless slurmctld is down or swamped; then we try again later.
_COMMAND_TIMEOUT_SECONDS = 60.0
_REQUIRED_TOOLS = ("sbatch", "squeue", "scancel")
# Set for the processes this one starts as a child; a batch job is not our child and must not inherit them.
_NOT_FOR_JOBS = (EXIT_WITH_PARENT_ENV, READY_FD_ENV)


class SlurmCommandError(RuntimeError):
    """A Slurm command failed; the message holds what it printed."""


@dataclasses.dataclass
class _Job:
    job_id: str
    worker_names: tuple[str, ...]
    state: GroupState = GroupState.PENDING
    detail: str = "submitted"


class SlurmAdapter(WorkerAdapter):
    """Each group is one batch job running `scaler_cluster -n <workers_per_job>` on one node.

    `spec` says how jobs are submitted (partition, CPUs, time limit, extra sbatch options, setup lines).
    Jobs run with this process's environment (sbatch's default `--export=ALL`), so `PATH`, a virtual
    environment's variables and `SCALER_CURVE_*` reach the workers. A job Slurm ends (preempted, past its
    time limit, node failure, `scancel` by an admin) is reported ENDED with Slurm's state as the detail;
    its workers were stopped by Slurm (SIGTERM, then SIGKILL) and the scheduler reschedules their tasks
    (at once when they said goodbye, after --worker-timeout-seconds otherwise).
    """

    def __init__(self, spec: SlurmJobSpec) -> None:
        missing = [tool for tool in _REQUIRED_TOOLS if shutil.which(tool) is None]
        if missing:
            raise FileNotFoundError(
                f"Slurm's {', '.join(missing)} not found on PATH; run this on a Slurm login node (or a machine "
                "with Slurm's client commands and configuration)"
            )
        self._spec = spec
        self._user = str(os.getuid())
        self._jobs: dict[str, _Job] = {}
        self._squeue_failing = False

    @property
    def spec(self) -> SlurmJobSpec:
        return self._spec

    @property
    def workers_per_group(self) -> int:
        return self._spec.workers_per_job

    # ------------------------------------------------------------------------------------------ interface

    def start_groups(self, count: int) -> list[WorkerGroup]:
        started = []
        script = self._spec.job_script()
        environment = sbatch_environment(os.environ, _NOT_FOR_JOBS)
        for _ in range(count):
            output = self._run(self._spec.sbatch_command(), stdin=script, environment=environment)
            job = _Job(parse_job_id(output), ())
            job.worker_names = self._spec.worker_names(job.job_id)
            self._jobs[job.job_id] = job
            logger.info(f"SlurmAdapter: submitted job {job.job_id} ({', '.join(job.worker_names)})")
            started.append(self._group(job))
        return started

    def stop_groups(self, group_ids: Iterable[str]) -> None:
        job_ids = [job_id for job_id in group_ids if job_id in self._jobs]
        if job_ids:
            self._cancel(job_ids)

    def poll(self) -> Sequence[WorkerGroup]:
        if not self._jobs:
            return []
        try:
            seen = parse_squeue(self._run(self._spec.squeue_command(self._user)))
        except SlurmCommandError as error:
            if not self._squeue_failing:
                logger.warning(f"SlurmAdapter: squeue failed, keeping the last known job states: {error}")
            self._squeue_failing = True
            return [self._group(job) for job in self._jobs.values()]
        if self._squeue_failing:
            logger.info("SlurmAdapter: squeue answers again")
            self._squeue_failing = False
        for job_id, (state, reason) in seen.items():
            job = self._jobs.get(job_id)
            if job is not None:
                job.state, job.detail = group_state(state), job_detail(state, reason)
        missing = [job_id for job_id in self._jobs if job_id not in seen]
        if missing:
            self._settle_missing(missing)
        report = [self._group(job) for job in self._jobs.values()]
        for job_id in [job.job_id for job in self._jobs.values() if job.state is GroupState.ENDED]:
            del self._jobs[job_id]
        return report

    def close(self) -> None:
        job_ids = list(self._jobs)
        self._jobs.clear()
        if job_ids:
            logger.info(f"SlurmAdapter: cancelling job(s) {', '.join(job_ids)}")
            self._cancel(job_ids)

    # ------------------------------------------------------------------------------------------ helpers

    def _settle_missing(self, job_ids: list[str]) -> None:
        """Jobs squeue no longer shows (purged after MinJobAge): accounting may say how they ended."""
        states: dict[str, str] = {}
        if shutil.which("sacct") is not None:
            try:
                states = parse_sacct(self._run(sacct_command(job_ids)))
            except SlurmCommandError as error:
                logger.debug(f"SlurmAdapter: sacct failed (accounting off?): {error}")
        for job_id in job_ids:
            job = self._jobs[job_id]
            state = states.get(job_id)
            if state is None:
                job.state, job.detail = GroupState.ENDED, "no longer known to squeue"
            else:
                job.state, job.detail = group_state(state), state

    def _cancel(self, job_ids: list[str]) -> None:
        try:
            self._run(["scancel", *job_ids])
        except SlurmCommandError as error:
            # Most often a job that ended meanwhile; squeue tells the rest.
            logger.warning(f"SlurmAdapter: scancel {' '.join(job_ids)}: {error}")

    def _group(self, job: _Job) -> WorkerGroup:
        return WorkerGroup(job.job_id, job.worker_names, job.state, job.detail)

    def _run(self, command: list[str], stdin: str | None = None, environment: dict[str, str] | None = None) -> str:
        try:
            completed = subprocess.run(
                command, input=stdin, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_SECONDS,
                env=environment, stdin=None if stdin is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"{command[0]} did not answer within {_COMMAND_TIMEOUT_SECONDS:g}s") from None
        except OSError as error:
            raise SlurmCommandError(f"cannot run {command[0]}: {error}") from None
        if completed.returncode != 0:
            said = (completed.stderr or completed.stdout).strip().replace("\n", "; ")
            raise SlurmCommandError(f"{command[0]} exited with {completed.returncode}: {said}")
        return completed.stdout
