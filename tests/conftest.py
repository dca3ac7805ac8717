"""Fixtures shared by the integration tests: real schedulers and workers, and a check that none leak."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import cloudpickle
import psutil
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def console_script(name: str) -> str:
    """The installed console script `name` (e.g. "scaler_ui") in the interpreter's bin directory.

    Tests start it by this path, as a user does, so its entry point runs, not `python -m`.
    """
    path = os.path.join(os.path.dirname(sys.executable), name)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{name} is not installed next to {sys.executable} (pip install -e '.[dev]')")
    return path


@pytest.fixture(autouse=True, scope="module")
def no_leftover_processes() -> Iterator[None]:
    """Every test module must reap what it started; a survivor fails the module's last test and is killed."""
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    yield
    leftovers = []
    for child in psutil.Process().children(recursive=True):
        if child.pid in before:
            continue
        try:
            child.wait(timeout=5)
        except psutil.TimeoutExpired:
            leftovers.append(child)
        except psutil.NoSuchProcess:
            pass
    for child in leftovers:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    assert not leftovers, f"processes left behind: {[(c.pid, c.cmdline()) for c in leftovers if c.is_running()]}"


@pytest.fixture
def python_env() -> dict[str, str]:
    """Environment for child Pythons that must import this checkout."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = REPO_ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    return environment


PYTHON = sys.executable


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Workers cannot import test modules, so functions defined in them travel by value, like `__main__`'s."""
    module = getattr(item, "module", None)
    if module is not None and module.__name__ not in _BY_VALUE:
        cloudpickle.register_pickle_by_value(module)
        _BY_VALUE.add(module.__name__)


_BY_VALUE: set[str] = set()
