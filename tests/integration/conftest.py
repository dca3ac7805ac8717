from __future__ import annotations

import pathlib
from typing import Iterator

import pytest

from scaler import Client, SchedulerClusterCombo
from tests.integration.spawned import Spawned, Spawner


@pytest.fixture(scope="module")
def combo() -> Iterator[SchedulerClusterCombo]:
    """One scheduler with two workers, shared by the tests of a module."""
    cluster = SchedulerClusterCombo(n_workers=2, logging_level="WARNING")
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture
def client(combo: SchedulerClusterCombo) -> Iterator[Client]:
    with Client(address=combo.get_address(), timeout_seconds=30) as connected:
        yield connected


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
