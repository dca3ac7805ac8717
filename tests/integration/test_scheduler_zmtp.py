"""The scheduler speaking ZMTP itself (SCALER_SCHEDULER_TRANSPORT=zmtp, scaler/utility/zmtp_router.py): its
unchanged peers, a Python worker, a native worker, a store and a client, work with it as with libzmq's ROUTER."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

import scaler
from scaler import Client, NeutralSerializer
from scaler.scheduler.router_link import TRANSPORT_ENV
from tests.conftest import child_python_environment, console_script
from tests.integration.spawned import Spawned
from tests.native_worker import BUILD_TIMEOUT_SECONDS, native_worker_executable
from tests.protocol.conftest import free_tcp_address

pytestmark = pytest.mark.timeout(120 + BUILD_TIMEOUT_SECONDS)

RESULT_SECONDS = 60.0


def plus_one(value: int) -> int:
    return value + 1


@pytest.fixture
def cluster(tmp_path: str) -> Iterator[str]:
    address = free_tcp_address()
    environment = child_python_environment()
    environment[TRANSPORT_ENV] = "zmtp"
    started: list[Spawned] = []

    def spawn(name: str, command: list[str]) -> Spawned:
        process = Spawned(command, os.path.join(str(tmp_path), f"{name}.log"), environment)
        started.append(process)
        return process

    try:
        scheduler = spawn("scheduler", [sys.executable, "-m", "scaler.cli.scheduler", address, "--logging-level",
                                        "INFO", "--worker-timeout-seconds", "5", "--heartbeat-interval-seconds", "0.5"])
        scheduler.wait_for_log("speaking ZMTP itself")
        spawn("python-worker", [console_script("scaler_cluster"), "-n", "1", address])
        spawn("native-worker", [native_worker_executable(), address, "--worker-name", "native-1"])
        spawn("store", [sys.executable, "-m", "scaler.cli.store", "--scheduler-address", address, "--name", "store-1",
                        "--capacity-bytes", str(64 << 20)])
        yield address
        assert scheduler.process.poll() is None, scheduler.log()
    finally:
        for process in reversed(started):
            if process.process.poll() is None:
                process.process.terminate()
        for process in reversed(started):
            try:
                process.process.wait(timeout=10)
            except Exception:
                process.process.kill()
                process.process.wait()
            print(f"---- {process.log_path} ----\n{process.log()}")


def test_python_and_native_workers_and_a_store_work_through_a_scheduler_speaking_zmtp(cluster: str) -> None:
    with Client(address=cluster, serializer=NeutralSerializer(python_objects=True), timeout_seconds=30) as client:
        assert [client.submit(plus_one, index).result(RESULT_SECONDS) for index in range(20)] == list(range(1, 21))
        assert client.map(scaler.native("add"), [(i, 1) for i in range(40)]) == list(range(1, 41))
        large = b"x" * (12 << 20)  # frames of many reads each way, through the scheduler or the store
        assert client.submit(len, large).result(RESULT_SECONDS) == len(large)
        assert client.submit(bytes, 5 << 20).result(RESULT_SECONDS) == bytes(5 << 20)
