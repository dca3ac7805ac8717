"""`scaler_slurm_cluster` against a real Slurm: Debian's slurm-wlm and munge, one slurmctld and one slurmd on
this host, configured, started and stopped by the fixture (tests/slurm/). The jobs run real `scaler_cluster`
workers that join a real scheduler; the test watches them in squeue and in the scheduler's monitor feed.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Iterator

import pytest

from scaler import Client
from scaler.ui.feed import MonitorSubscriber
from tests.conftest import child_python_environment, console_script
from tests.integration.scheduler_process import SchedulerProcess, wait_for_snapshot
from tests.integration.spawned import Spawned
from tests.slurm.local_slurm import LocalSlurm, unavailable_reason

pytestmark = pytest.mark.timeout(240)

IDLE_SECONDS = 3.0
WAIT_SECONDS = 90.0  # upper bounds only, for a loaded machine
# It cancels its Slurm jobs on SIGTERM before it exits.
SCALER_STOP_SECONDS = 60.0


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    local = LocalSlurm(str(tmp_path_factory.mktemp("slurm")), child_python_environment())
    sys.stderr.write(f"\ntest Slurm (slurmctld + slurmd + munged) ready in {local.startup_seconds:.2f}s\n")
    try:
        yield local
    finally:
        local.stop()


class SlurmScaler(Spawned):
    """`scaler_slurm_cluster` as a user runs it, logging to a file."""

    def __init__(self, slurm: LocalSlurm, scheduler: SchedulerProcess, directory: str, job_name: str) -> None:
        super().__init__(
            [
                console_script("scaler_slurm_cluster"), scheduler.address, "--partition", "scaler",
                "--max-workers", "2", "--idle-seconds", str(IDLE_SECONDS), "--poll-seconds", "0.5",
                "--monitor-address", scheduler.monitor_address, "--job-name", job_name,
                "--output", os.path.join(directory, "%x-%j.out"),
            ],
            os.path.join(directory, f"{job_name}.log"), slurm.environment,
        )


def slow_square(value: int) -> int:
    time.sleep(0.5)
    return value * value


def gated_square(value: int, gate: str) -> int:
    """value * value once the test opens the gate (a file): the burst lasts as long as the test needs."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value * value


def wait_until(condition, timeout: float, what: str, details=lambda: "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}\n{details()}")
        time.sleep(0.2)


def test_a_burst_brings_workers_as_slurm_jobs_which_go_once_idle(slurm: LocalSlurm, tmp_path) -> None:
    job_name = "scaler-burst"
    gate = str(tmp_path / "gate")
    with SchedulerProcess(str(tmp_path)) as scheduler, MonitorSubscriber(scheduler.monitor_address) as monitor:
        scaler = SlurmScaler(slurm, scheduler, str(tmp_path), job_name)
        try:
            wait_for_snapshot(monitor, lambda s: not s.workers, 30, "an empty cluster")
            assert slurm.jobs(job_name) == {}
            with Client(address=scheduler.address, timeout_seconds=60) as client:
                # The burst holds until both workers are seen (tasks that only slept made it last, for longer).
                futures = [client.submit(gated_square, value, gate) for value in range(16)]
                # Two Slurm jobs run, and each one's worker has joined under the job's id.
                snapshot = wait_for_snapshot(monitor, lambda s: len(s.workers) == 2, WAIT_SECONDS, "two workers")
                jobs = slurm.jobs(job_name)
                assert sorted(f"{job_name}-{job_id}|0" for job_id in jobs) == sorted(w.name for w in snapshot.workers)
                assert set(jobs.values()) <= {"RUNNING", "COMPLETING"}, jobs
                assert not any(future.done() for future in futures)
                open(gate, "w").close()
                assert [future.result(timeout=WAIT_SECONDS) for future in futures] == [v * v for v in range(16)]
            # Idle for IDLE_SECONDS: both jobs are cancelled and their workers leave.
            wait_for_snapshot(monitor, lambda s: not s.workers, WAIT_SECONDS, "every worker gone")
            wait_until(lambda: slurm.jobs(job_name) == {}, WAIT_SECONDS, "the jobs gone", scaler.log)
            log = scaler.log()
            assert "AdaptiveScaler: stopping group(s)" in log and "idle for 3s" in log, log
            # Each job's worker was drained through the scheduler before its job was cancelled.
            drains = " ".join(line for line in log.splitlines() if "AdaptiveScaler: draining worker(s)" in line)
            assert all(f"{job_name}-{job_id}|0" in drains for job_id in jobs), log
            assert "(drained)" in log, log
        finally:
            open(gate, "w").close()  # whatever happened, no task waits past the test
            scaler.stop(SCALER_STOP_SECONDS)
        assert scaler.process.returncode == 0, scaler.log()


def test_a_job_cancelled_mid_run_loses_no_task_and_is_replaced(slurm: LocalSlurm, tmp_path) -> None:
    job_name = "scaler-cancel"
    with SchedulerProcess(str(tmp_path)) as scheduler, MonitorSubscriber(scheduler.monitor_address) as monitor:
        scaler = SlurmScaler(slurm, scheduler, str(tmp_path), job_name)
        try:
            with Client(address=scheduler.address, timeout_seconds=60) as client:
                futures = [client.submit(slow_square, value) for value in range(24)]
                busy = wait_for_snapshot(
                    monitor, lambda s: len(s.workers) == 2 and all(w.assigned > 0 for w in s.workers),
                    WAIT_SECONDS, "two workers with tasks",
                )
                victim = busy.workers[0].name.split("|")[0].rsplit("-", 1)[1]
                slurm.run("scancel", victim)  # as an admin, a preemption or a time limit would
                assert [future.result(timeout=WAIT_SECONDS) for future in futures] == [v * v for v in range(24)]
            wait_until(
                lambda: f"group {victim} was ended by the resource manager (CANCELLED" in scaler.log(),
                WAIT_SECONDS, "the cancelled job reported", scaler.log,
            )
            # The work outlived the job: another one was submitted while tasks waited.
            assert scaler.log().count("SlurmAdapter: submitted job") >= 3, scaler.log()
        finally:
            scaler.stop(SCALER_STOP_SECONDS)
        # Stopping scaler_slurm_cluster cancels what it still runs.
        wait_until(lambda: slurm.jobs(job_name) == {}, WAIT_SECONDS, "the jobs gone", scaler.log)
