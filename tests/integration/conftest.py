from __future__ import annotations

from typing import Iterator

import pytest

from scaler import Client, SchedulerClusterCombo


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
