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


def test_a_workers_hello_to_a_scheduler_refusing_its_key_waits_without_blocking_and_gives_up_saying_why(
    spawn: Spawner, keys: dict[str, str]
) -> None:
    """With its key refused, the libzmq DEALER has no pipe and a blocking send would wait out the death timeout,
    the agent reading neither its handshake watch nor its processors meanwhile (a worker then gave up naming no
    reason). A hello that must not be dropped is held instead, and the flush that gives up names the refusal."""
    import time

    from scaler.protocol import messages as m
    from scaler.utility.curve import PeerKeys
    from scaler.worker.config import WorkerConfig
    from scaler.worker.scheduler_link import LinkStuck, ZmqSchedulerLink

    address = free_local_address()
    start_scheduler(spawn, address, "--curve-secret-key", keys["scheduler_secret"],
                    "--curve-authorized-keys", keys["authorized"])
    config = WorkerConfig(address=address, death_timeout_seconds=2, curve_server_key=keys["scheduler_public"],
                          curve_secret_key=keys["intruder"])
    curve_keys = PeerKeys.resolve(config.curve_server_key, config.curve_secret_key)
    link = ZmqSchedulerLink(config, b"refused-worker", address, time.monotonic(), curve_keys)
    try:
        deadline = time.monotonic() + 60
        told: list[str] = []
        while not told:
            assert time.monotonic() < deadline, "the refusal was never seen"
            told = link.tick(time.monotonic())
            time.sleep(0.01)
        assert "refused this worker's key" in told[0]
        hello = m.encode(m.Hello(role=m.Role.WORKER, name="refused-worker"))
        with pytest.raises(LinkStuck) as stuck:
            while time.monotonic() < deadline:
                link.send(hello, may_drop=False)  # held, never waiting in zmq_send
                link.flush()
                assert link.tick(time.monotonic()) == []  # told once
                time.sleep(0.05)
        assert "no usable connection to the scheduler" in str(stuck.value)
        assert "refused this worker's key (CURVE authentication failed" in str(stuck.value)
        assert stuck.traceback[-1].name == "flush"  # not from a send that waited
    finally:
        link.close([])


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
