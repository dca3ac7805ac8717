from __future__ import annotations

import importlib.util
import pathlib
import sys
from typing import Iterator

import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from tests.integration.spawned import Spawned, Spawner


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """dask's own tests last, so that the suite runs while their session does (see below)."""
    items.sort(key=lambda item: item.path.name == "test_dask_suite.py")  # a stable sort: the rest keep their order


def pytest_collection_finish(session: pytest.Session) -> None:
    """dask's own tests take minutes through scaler.get, mostly waiting on round trips: when they are
    selected, their sessions (through scaler.get, and the listed failures through dask.multiprocessing.get)
    start now and run while the rest of the suite does (test_dask_suite.py)."""
    if session.config.option.collectonly:
        return
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller starts them (tests/conftest.py)
    if importlib.util.find_spec("dask") is None:
        return  # test_dask_suite.py skips and says so
    needed = {
        name for item in session.items if item.path.name == "test_dask_suite.py"
        for name in getattr(item, "fixturenames", ()) if name in ("scaler_report", "multiprocessing_report")
    }
    if "scaler_report" in needed:
        from tests.dask_suite.selection import MODULES
        from tests.dask_suite.session import start_scaler_session

        start_scaler_session(list(MODULES))
    if "multiprocessing_report" in needed:
        from tests.dask_suite.expected_failures import EXPECTED_FAILURES
        from tests.dask_suite.session import start_multiprocessing_session

        start_multiprocessing_session(list(EXPECTED_FAILURES))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Whatever happened, no dask session outlives the suite."""
    module = sys.modules.get("tests.dask_suite.session")
    if module is not None:
        module.stop_sessions()


@pytest.fixture(scope="module")
def combo() -> Iterator[SchedulerClusterCombo]:
    """One scheduler with two workers, shared by the tests of a module."""
    with SchedulerClusterCombo(n_workers=2, logging_level="WARNING") as cluster:
        yield cluster


@pytest.fixture
def client(combo: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(address=combo.get_address(), timeout_seconds=30) as connected:
        yield connected


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    """A zmq context for a test's own sockets, every one of them closed at the end."""
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture
def spawn(tmp_path: pathlib.Path, python_env: dict[str, str]) -> Iterator[Spawner]:
    """spawn(name, args) starts a console script; all of them are stopped and reaped at the end of the test."""
    environment = dict(python_env)
    environment.pop("SCALER_EXIT_WITH_PARENT", None)  # run as a user would, not as a combo's child
    started: list[Spawned] = []

    def start(name: str, args: list[str]) -> Spawned:
        spawned = Spawned(args, str(tmp_path / f"{name}.log"), environment)
        started.append(spawned)
        return spawned

    try:
        yield start
    finally:
        for spawned in reversed(started):  # workers first, then the scheduler
            spawned.stop()
