"""The nesting depth a Client sends with each task: read once per process (a submit reads a module global, not the
environment), and still what the running task says, whoever runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scaler.adapters.symphony.task_call import TaskCall
from scaler.utility import blocking
from tests.conftest import child_python_environment


@pytest.fixture
def task_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as a worker's, for the test: what a task sets here is undone after it."""
    monkeypatch.setenv(blocking.NESTING_DEPTH_ENVIRONMENT_VARIABLE, "0")
    monkeypatch.setattr(blocking, "_nesting_depth", 0)


def test_each_task_of_a_processor_sets_the_depth_its_clients_send(task_process: None) -> None:
    for depth in (0, 3, 1):
        blocking.set_task_depth(depth)
        assert blocking.client_nesting_depth() == depth + 1


def test_a_symphony_task_sets_it_in_a_service_host_that_has_loaded_scaler(task_process: None) -> None:
    """A host runs many tasks in one process: a client made by an earlier task loaded scaler there already."""
    for depth in (2, 0):
        assert TaskCall(blocking.client_nesting_depth, {}, depth)() == depth + 1


def test_a_process_a_task_started_reads_the_depth_it_inherits() -> None:
    environment = dict(child_python_environment(), SCALER_NESTING_DEPTH="4")
    script = "from scaler.utility.blocking import client_nesting_depth; print(client_nesting_depth())"
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "4", done.stderr
