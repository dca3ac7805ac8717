"""The worker's agent speaking ZMTP itself (SCALER_WORKER_TRANSPORT=zmtp, scaler/utility/zmtp_dealer.py), with a
scheduler on libzmq's ROUTER and with one speaking ZMTP itself too: tasks run, the worker comes back after its
scheduler restarts, and it leaves at its death timeout when no scheduler is there."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from scaler import Client
from scaler.scheduler.router_link import TRANSPORT_ENV as SCHEDULER_TRANSPORT_ENV
from scaler.worker.scheduler_link import TRANSPORT_ENV as WORKER_TRANSPORT_ENV
from tests.conftest import console_script
from tests.integration.spawned import Spawner, start_scheduler
from tests.protocol.conftest import free_tcp_address

pytestmark = pytest.mark.timeout(120)

RESULT_SECONDS = 60.0


def plus_one(value: int) -> int:
    return value + 1


@pytest.fixture
def python_env(python_env: dict[str, str], request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """Every process spawned: the worker speaks ZMTP itself, the scheduler as the parameter says (zmq if none)."""
    yield {**python_env, WORKER_TRANSPORT_ENV: "zmtp", SCHEDULER_TRANSPORT_ENV: getattr(request, "param", "zmq")}


def run_tasks(address: str) -> None:
    with Client(address=address, timeout_seconds=30) as client:
        assert [client.submit(plus_one, index).result(RESULT_SECONDS) for index in range(20)] == list(range(1, 21))
        assert client.map(plus_one, [(index,) for index in range(100)]) == list(range(1, 101))
        large = b"x" * (12 << 20)  # frames of many reads and writes each way
        assert client.submit(len, large).result(RESULT_SECONDS) == len(large)
        assert client.submit(bytes, 5 << 20).result(RESULT_SECONDS) == bytes(5 << 20)


@pytest.mark.parametrize("python_env", ["zmq", "zmtp"], indirect=True)
def test_a_worker_speaking_zmtp_runs_tasks_and_comes_back_after_its_scheduler_restarts(spawn: Spawner) -> None:
    address = free_tcp_address()
    scheduler = start_scheduler(spawn, address, "--worker-timeout-seconds", "5")
    cluster = spawn("cluster", [console_script("scaler_cluster"), "-n", "1", "-ll", "INFO", address])
    cluster.wait_for_log("speaking ZMTP itself")
    run_tasks(address)
    scheduler.stop()
    start_scheduler(spawn, address, "--worker-timeout-seconds", "5", name="scheduler-again")
    run_tasks(address)  # the worker reconnected on its own and rejoined
    assert cluster.process.poll() is None, cluster.log()
    assert "Traceback" not in cluster.log(), cluster.log()


def test_a_worker_speaking_zmtp_leaves_at_its_death_timeout_when_no_scheduler_answers(spawn: Spawner) -> None:
    address = free_tcp_address()  # nobody listens there
    cluster = spawn("cluster", [console_script("scaler_cluster"), "-n", "1", "-ll", "INFO", "-ds", "3", address])
    assert cluster.wait_exit() == 1, cluster.log()
    text = cluster.log()
    assert "speaking ZMTP itself" in text, text
    errors = [line for line in text.splitlines() if line.startswith("[ERROR]")]
    assert any(address in line and "3s" in line for line in errors), text


def test_a_worker_speaking_zmtp_to_a_curve_scheduler_says_it_needs_keys(spawn: Spawner, tmp_path: Path) -> None:
    """The handshake diagnosis the agent logs with libzmq's monitor, fed by the ZMTP link's own events: a plain
    worker at a CURVE scheduler is told within seconds, then leaves at its death timeout."""
    keys = tmp_path / "keys"
    subprocess.run([console_script("scaler_keygen"), str(keys), "scheduler"], check=True, capture_output=True,
                   timeout=60)
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    address = free_tcp_address()
    start_scheduler(spawn, address, "--curve-secret-key", str(keys / "scheduler.key_secret"),
                    "--curve-authorized-keys", str(authorized))
    cluster = spawn("cluster", [console_script("scaler_cluster"), "-n", "1", "-ll", "INFO", "-ds", "3", address])
    assert cluster.wait_exit() == 1, cluster.log()
    text = cluster.log()
    assert "speaking ZMTP itself" in text, text
    # The worker's own line (the cluster's store, on libzmq, tells the same of its link).
    assert any("Worker[" in line and "requires CURVE keys" in line for line in text.splitlines()), text
