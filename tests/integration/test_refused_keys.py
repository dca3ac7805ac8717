"""A peer whose CURVE key the scheduler refuses says so within seconds (handshake_failures.py), instead of
waiting for an answer that never comes and leaving it to look like a scheduler out of reach."""

from __future__ import annotations

import subprocess

import pytest

from scaler.cluster.combo import free_local_address
from tests.conftest import console_script
from tests.integration.spawned import Spawner, start_scheduler

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def keys(tmp_path) -> dict[str, str]:
    directory = tmp_path / "keys"
    subprocess.run(
        [console_script("scaler_keygen"), str(directory), "scheduler", "worker", "intruder"],
        check=True, capture_output=True, timeout=60,
    )
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    (authorized / "worker.key").write_bytes((directory / "worker.key").read_bytes())
    return {
        "authorized": str(authorized), "scheduler_secret": str(directory / "scheduler.key_secret"),
        "scheduler_public": str(directory / "scheduler.key"), "intruder": str(directory / "intruder.key_secret"),
    }


def test_a_worker_and_its_store_with_a_key_the_scheduler_refuses_say_so(spawn: Spawner, keys: dict[str, str]) -> None:
    address = free_local_address()
    start_scheduler(spawn, address, "--curve-secret-key", keys["scheduler_secret"],
                    "--curve-authorized-keys", keys["authorized"])
    cluster = spawn("cluster", [
        console_script("scaler_cluster"), "-n", "1", "--death-timeout-seconds", "3",
        "--curve-server-key", keys["scheduler_public"],
        "--curve-secret-key", keys["intruder"], address,
    ])
    for role in ("worker", "store"):
        needle = f"refused this {role}'s key (CURVE authentication failed"
        (line,) = [line for line in cluster.wait_for_log(needle).splitlines() if needle in line]
        assert f"the scheduler at {address} {needle}" in line and "authorized keys" in line
    # At the death timeout, each says why it gives up: not a scheduler out of reach, but a refused key.
    cluster.wait_for_log("Store: stopping: no word from the scheduler")
    assert cluster.wait_exit() == 1
    for line in cluster.log().splitlines():
        if "Store: stopping" in line or ("Worker[" in line and "exiting" in line):
            assert "refused this" in line, line


def test_a_client_with_a_key_the_scheduler_refuses_fails_at_once_saying_so(
    spawn: Spawner, keys: dict[str, str]
) -> None:
    from scaler import Client
    from scaler.errors import ConnectionFailedError

    address = free_local_address()
    start_scheduler(spawn, address, "--curve-secret-key", keys["scheduler_secret"],
                    "--curve-authorized-keys", keys["authorized"])
    # Without the diagnosis, this waits out its timeout and blames an unreachable scheduler.
    with pytest.raises(ConnectionFailedError) as raised:
        Client(address=address, timeout_seconds=20, curve_server_key=keys["scheduler_public"],
               curve_secret_key=keys["intruder"])
    text = str(raised.value)
    assert f"the scheduler at {address} rejected this client's CURVE keys" in text
    assert "refused this client's key (CURVE authentication failed" in text and "authorized keys" in text
