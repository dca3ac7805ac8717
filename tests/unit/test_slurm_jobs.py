"""What the Slurm adapter says to Slurm and how it reads the answers, and the checks of its command line."""

from __future__ import annotations

import pytest

from scaler.adapters.slurm_jobs import (
    SlurmJobSpec,
    group_state,
    job_detail,
    parse_job_id,
    parse_sacct,
    parse_squeue,
)
from scaler.adapters.worker_adapter import GroupState
from scaler.cli import slurm_cluster


def spec(**overrides: object) -> SlurmJobSpec:
    fields: dict = {"address": "tcp://login1:2345", "partition": "batch", "python": "/shared/venv/bin/python"}
    fields.update(overrides)
    return SlurmJobSpec(**fields)


def test_the_job_runs_scaler_cluster_with_names_made_from_the_job_id() -> None:
    job = spec(workers_per_job=2, setup_commands=("module load python",), worker_arguments=("-wtqs", "10"))
    script = job.job_script()
    assert script.startswith("#!/bin/sh\n")
    assert "module load python\n" in script
    last = script.strip().splitlines()[-1]
    assert last == (
        'exec /shared/venv/bin/python -m scaler.cli.cluster -n 2 -wtqs 10 '
        '--worker-names "scaler-worker-${SLURM_JOB_ID}|0,scaler-worker-${SLURM_JOB_ID}|1" tcp://login1:2345'
    )
    # What the shell makes of ${SLURM_JOB_ID} is checked end to end by tests/integration/test_slurm.py.
    assert job.worker_names("17") == ("scaler-worker-17|0", "scaler-worker-17|1")


def test_sbatch_asks_for_one_node_the_cpus_and_no_requeue() -> None:
    command = spec(workers_per_job=4, time_limit="01:00:00", sbatch_options=("--account=p1",)).sbatch_command()
    assert command[:2] == ["sbatch", "--parsable"]
    for option in ("--partition=batch", "--nodes=1", "--ntasks=1", "--cpus-per-task=4", "--no-requeue",
                   "--time=01:00:00", "--account=p1", "--job-name=scaler-worker"):
        assert option in command
    assert "--cpus-per-task=8" in spec(workers_per_job=4, cpus_per_job=8).sbatch_command()


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"partition": ""}, "partition"),
        ({"job_name": "a b"}, "job name"),
        ({"job_name": "x;rm"}, "job name"),
        ({"workers_per_job": 0}, "workers_per_job"),
        ({"cpus_per_job": 0}, "cpus_per_job"),
    ],
)
def test_a_bad_job_spec_is_refused(overrides: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        spec(**overrides)


def test_slurm_answers_are_read() -> None:
    assert parse_job_id("1234\n") == "1234"
    assert parse_job_id("1234;cluster2\n") == "1234"
    with pytest.raises(ValueError, match="no job id"):
        parse_job_id("sbatch: error: Batch job submission failed\n")
    assert parse_squeue("12|RUNNING|None\n13|PENDING|Resources\n\n") == {
        "12": ("RUNNING", "None"), "13": ("PENDING", "Resources"),
    }
    assert parse_sacct("12|CANCELLED by 0\n13|TIMEOUT\n") == {"12": "CANCELLED", "13": "TIMEOUT"}
    assert job_detail("PENDING", "Resources") == "PENDING (Resources)"
    assert job_detail("CANCELLED", "None") == "CANCELLED"


@pytest.mark.parametrize(
    ("slurm_state", "state"),
    [
        ("PENDING", GroupState.PENDING), ("CONFIGURING", GroupState.PENDING), ("REQUEUED", GroupState.PENDING),
        ("RUNNING", GroupState.RUNNING), ("COMPLETING", GroupState.RUNNING), ("SUSPENDED", GroupState.RUNNING),
        ("COMPLETED", GroupState.ENDED), ("CANCELLED", GroupState.ENDED), ("TIMEOUT", GroupState.ENDED),
        ("PREEMPTED", GroupState.ENDED), ("NODE_FAIL", GroupState.ENDED), ("FAILED", GroupState.ENDED),
        ("OUT_OF_MEMORY", GroupState.ENDED), ("BOOT_FAIL", GroupState.ENDED), ("DEADLINE", GroupState.ENDED),
    ],
)
def test_slurm_states_become_group_states(slurm_state: str, state: GroupState) -> None:
    assert group_state(slurm_state) is state


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--worker-options=--no-such-option"], "unrecognized arguments: --no-such-option"),
        (["--worker-options", "-wtqs zero"], "--per-worker-task-queue-size"),
        (["--worker-options", "-n 4"], "-n is set by scaler_slurm_cluster"),
        (["--worker-options", "'unclosed"], "--worker-options"),
        (["--min-workers", "5", "--max-workers", "2"], "--min-workers (5) is above --max-workers (2)"),
        (["--job-name", "two words"], "--job-name"),
        (["--idle-seconds", "0"], "--idle-seconds"),
    ],
)
def test_bad_options_are_one_line_errors_before_anything_starts(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        slurm_cluster.main(["tcp://127.0.0.1:2345", "--partition", "batch", *arguments])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_partition_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        slurm_cluster.main(["tcp://127.0.0.1:2345"])
    assert "--partition" in capsys.readouterr().err
