"""Processes a task starts (a loky pool in a scikit-learn fit, a subprocess) go when its processor goes.

Found running joblib's own tests: a task that used joblib's default backend left loky workers in its
processor, which outlived the whole cluster for the five minutes of loky's idle timeout.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo

GONE_WITHIN_SECONDS = 30.0


def start_sleeper(then_sleep: float) -> int:
    """Start a process that outlives this task unless someone stops it; return its pid."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if then_sleep:
        with open(os.environ["SCALER_TEST_PID_FILE"], "w") as pid_file:
            pid_file.write(str(sleeper.pid))
        time.sleep(then_sleep)
    return sleeper.pid


def assert_gone(pid: int) -> None:
    try:
        sleeper = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    try:
        sleeper.wait(timeout=GONE_WITHIN_SECONDS)
    except psutil.TimeoutExpired:
        sleeper.kill()  # the test reaps what it made either way
        pytest.fail(f"process {pid}, started by a task, outlived its processor")


def test_a_process_started_by_a_task_goes_with_the_cluster() -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        with Client(address=cluster.get_address(), timeout_seconds=30) as client:
            pid = client.submit(start_sleeper, 0).result(timeout=60)
            assert psutil.pid_exists(pid)
    assert_gone(pid)


def test_a_process_started_by_a_task_goes_when_the_task_is_force_canceled(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "sleeper.pid"
    monkeypatch.setenv("SCALER_TEST_PID_FILE", str(pid_file))  # the cluster's processes inherit it
    with SchedulerClusterCombo(n_workers=1, logging_level="ERROR") as cluster:
        with Client(address=cluster.get_address(), timeout_seconds=30) as client:
            running = client.submit(start_sleeper, 600)
            deadline = time.monotonic() + 60
            while not pid_file.exists() or not pid_file.read_text():
                assert time.monotonic() < deadline, "the task did not start its process"
                time.sleep(0.05)
            pid = int(pid_file.read_text())
            assert running.cancel(force=True)
            assert_gone(pid)
            assert client.submit(abs, -1).result(timeout=60) == 1  # the worker goes on with a new processor
