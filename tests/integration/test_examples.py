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
