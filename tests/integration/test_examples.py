"""Each example in examples/ runs as a user would run it, and prints what it promises."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

EXAMPLES = os.path.join(REPO_ROOT, "examples")


def run_example(name: str, environment: dict[str, str]) -> str:
    completed = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name)],
        env=environment, capture_output=True, text=True, timeout=180, cwd=REPO_ROOT,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout


@pytest.mark.timeout(200)
def test_simple_client(python_env: dict[str, str]) -> None:
    output = run_example("simple_client.py", python_env)
    assert "4.0" in output
    assert "[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]" in output


@pytest.mark.timeout(200)
def test_map_client(python_env: dict[str, str]) -> None:
    output = run_example("map_client.py", python_env)
    assert "661.46" in output


@pytest.mark.timeout(200)
def test_calculate_100k_tasks(python_env: dict[str, str]) -> None:
    output = run_example("calculate.py", python_env)
    assert "100000 tasks done" in output


# The examples of document 003 (scaler_top's is covered by tests/integration/test_top.py).


def printed(output: str) -> list[str]:
    """What the example printed itself, without the log lines of the cluster it started."""
    return [line for line in output.splitlines() if not line.startswith("[")]


@pytest.mark.timeout(200)
def test_send_object_example(python_env: dict[str, str]) -> None:
    assert printed(run_example("send_object.py", python_env)) == ["1", "2"]


@pytest.mark.timeout(200)
def test_nested_client_example(python_env: dict[str, str]) -> None:
    assert printed(run_example("nested_client.py", python_env)) == ["21"]


@pytest.mark.timeout(200)
def test_graphtask_nested_client_example(python_env: dict[str, str]) -> None:
    assert printed(run_example("graphtask_nested_client.py", python_env)) == ["21"]


@pytest.mark.timeout(200)
def test_disconnect_client_example(python_env: dict[str, str]) -> None:
    run_example("disconnect_client.py", python_env)


@pytest.mark.timeout(200)
def test_task_profiling_example(python_env: dict[str, str]) -> None:
    output = run_example("task_profiling.py", python_env)
    assert "duration_us" in output and "peak_memory" in output


@pytest.mark.timeout(200)
def test_custom_serializer_example(python_env: dict[str, str]) -> None:
    assert printed(run_example("custom_serializer.py", python_env)) == ["3", "6"]
