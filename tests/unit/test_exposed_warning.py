"""A scheduler without CURVE keys warns when it listens beyond loopback: anyone reaching the port runs code."""

from __future__ import annotations

import logging

import pytest

from scaler.scheduler.server import _warn_if_exposed


@pytest.mark.parametrize("address", [
    "tcp://127.0.0.1:2345", "tcp://localhost:2345", "tcp://[::1]:2345", "tcp://127.0.0.2:2345",
    "ipc:///tmp/scaler.sock",
])
def test_loopback_and_ipc_are_not_exposed(address: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        _warn_if_exposed(address)
    assert not caplog.records


@pytest.mark.parametrize("address", ["tcp://0.0.0.0:2345", "tcp://10.1.2.3:2345", "tcp://*:2345", "tcp://example.org:2345"])
def test_other_hosts_are_exposed(address: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        _warn_if_exposed(address)
    assert "without authentication" in caplog.text
