"""CURVE authentication and encryption, the exposure warning, and the size limits of the scheduler."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import zmq

from scaler import Client, SchedulerClusterCombo
from scaler.cluster.combo import free_local_address
from scaler.errors import ConnectionFailedError
from scaler.protocol import messages as m
from scaler.utility import curve
from scaler.utility.process_stop import stop_process
from tests.conftest import console_script
from tests.integration.spawned import Spawner, start_scheduler

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def keys(tmp_path) -> dict[str, str]:
    directory = tmp_path / "keys"
    subprocess.run(
        [console_script("scaler_keygen"), str(directory), "scheduler", "worker", "client", "intruder"],
        check=True, capture_output=True, timeout=60,
    )
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    for name in ("worker", "client"):
        (authorized / f"{name}.key").write_bytes((directory / f"{name}.key").read_bytes())
    return {
        "dir": str(directory),
        "authorized": str(authorized),
        "scheduler_secret": str(directory / "scheduler.key_secret"),
        "scheduler_public": str(directory / "scheduler.key"),
    }


def test_only_peers_with_authorized_keys_get_in(keys: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # The combo's processes read their keys from the environment, as a deployment would.
    monkeypatch.setenv(curve.SCHEDULER_SECRET_KEY_ENV, keys["scheduler_secret"])
    monkeypatch.setenv(curve.AUTHORIZED_KEYS_ENV, keys["authorized"])
    monkeypatch.setenv(curve.SERVER_KEY_ENV, keys["scheduler_public"])
    monkeypatch.setenv(curve.SECRET_KEY_ENV, os.path.join(keys["dir"], "worker.key_secret"))
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        monkeypatch.delenv(curve.SERVER_KEY_ENV)
        monkeypatch.delenv(curve.SECRET_KEY_ENV)
        with Client(
            address=cluster.get_address(),
            curve_server_key=keys["scheduler_public"],
            curve_secret_key=os.path.join(keys["dir"], "client.key_secret"),
        ) as client:
            assert client.submit(pow, 2, 8).result(timeout=60) == 256

        # A key the scheduler does not know: refused, nothing can be submitted.
        with pytest.raises(ConnectionFailedError):
            Client(
                address=cluster.get_address(), timeout_seconds=2,
                curve_server_key=keys["scheduler_public"],
                curve_secret_key=os.path.join(keys["dir"], "intruder.key_secret"),
            )
        # No key at all: a plain socket cannot even say hello.
        with pytest.raises(ConnectionFailedError):
            Client(address=cluster.get_address(), timeout_seconds=2)


def nested_through(client: Client) -> tuple[int, str]:
    """A task handed the client: it submits a nested task through it, and says under which name."""
    return client.submit(pow, 2, 10).result(timeout=60), client.name


def test_a_client_passed_into_a_task_reconnects_to_a_cluster_secured_by_options_only(
    keys: dict[str, str], tmp_path, python_env: dict[str, str]
) -> None:
    """No CURVE variable anywhere: the keys reach the scheduler, the workers and the client as options, and
    the client rebuilt inside the task must bring its own, and its name, to get in."""
    environment = {name: value for name, value in python_env.items() if not name.startswith("SCALER_CURVE_")}
    environment.pop("SCALER_EXIT_WITH_PARENT", None)
    address = free_local_address()
    log_path = tmp_path / "cluster.log"
    with open(log_path, "wb") as log:
        scheduler = subprocess.Popen(
            [console_script("scaler_scheduler"), "--curve-secret-key", keys["scheduler_secret"],
             "--curve-authorized-keys", keys["authorized"], address],
            env=environment, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )
        workers = subprocess.Popen(
            [console_script("scaler_cluster"), "-n", "1", "--curve-server-key", keys["scheduler_public"],
             "--curve-secret-key", os.path.join(keys["dir"], "worker.key_secret"), address],
            env=environment, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        with Client(
            address=address, name="reporting-app", timeout_seconds=10,
            curve_server_key=keys["scheduler_public"], curve_secret_key=os.path.join(keys["dir"], "client.key_secret"),
        ) as client:
            assert client.submit(nested_through, client).result(timeout=90) == (1024, "reporting-app"), (
                log_path.read_text()
            )
        # The cluster's store got in with the workers' keys too (PROTOCOL.md §17).
        deadline = time.monotonic() + 60
        while "Store: registered with the scheduler" not in log_path.read_text():
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        assert "StoreRegistry: store" in log_path.read_text()
    finally:
        for process in (workers, scheduler):
            stop_process(process, grace_seconds=30)


def test_a_standby_with_the_clusters_keys_stands_by_for_a_curve_scheduler_then_takes_over(
    keys: dict[str, str], spawn: Spawner,
) -> None:
    """Both schedulers hold the cluster's key pair (peers know one server key): the standby's probes get through
    the first one's CURVE handshake, so it stands by while that one serves, and serves once it is gone."""
    first, second = free_local_address(), free_local_address()
    secured = ["--curve-secret-key", keys["scheduler_secret"], "--curve-authorized-keys", keys["authorized"],
               "--heartbeat-interval-seconds", "0.3", "--worker-timeout-seconds", "5", "--client-timeout-seconds", "5"]
    first_scheduler = start_scheduler(spawn, first, *secured, name="first")
    standby = start_scheduler(
        spawn, second, *secured, "--standby-of", first, "--standby-takeover-seconds", "1", name="standby"
    )
    workers = spawn("cluster", [
        console_script("scaler_cluster"), "-n", "1", "--heartbeat-interval", "0.3", "--no-borrowing",
        "--curve-server-key", keys["scheduler_public"], "--curve-secret-key",
        os.path.join(keys["dir"], "worker.key_secret"), f"{first},{second}",
    ])
    workers.wait_for_log("all 1 workers registered")
    with Client(
        address=f"{first},{second}", timeout_seconds=60, heartbeat_interval_seconds=0.3,
        curve_server_key=keys["scheduler_public"], curve_secret_key=os.path.join(keys["dir"], "client.key_secret"),
    ) as client:
        assert client.submit(pow, 2, 8).result(timeout=60) == 256
        time.sleep(2)  # past the takeover time: the first one answers the probes, so the standby stands by
        assert "taking over" not in standby.log(), standby.log()
        first_scheduler.process.kill()
        first_scheduler.process.wait(timeout=60)
        standby.wait_for_log("taking over")
        assert client.submit(pow, 3, 4).result(timeout=60) == 81


def test_a_plain_socket_gets_no_answer_from_a_curve_scheduler(keys: dict[str, str]) -> None:
    address = free_local_address()
    environment = dict(os.environ)
    environment[curve.SCHEDULER_SECRET_KEY_ENV] = keys["scheduler_secret"]
    environment[curve.AUTHORIZED_KEYS_ENV] = keys["authorized"]
    scheduler = subprocess.Popen(
        [console_script("scaler_scheduler"), address], env=environment,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    context = zmq.Context()
    raw = context.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    try:
        raw.connect(address)
        raw.send(m.encode(m.Hello(role=m.Role.CLIENT))[0])
        assert raw.poll(2000) == 0, "a CURVE scheduler answered an unauthenticated peer"
    finally:
        raw.close()
        context.term()
        scheduler.terminate()
        output, _ = scheduler.communicate(timeout=30)
    assert "CURVE on" in output


def test_listening_beyond_loopback_without_keys_warns() -> None:
    port = free_local_address().rsplit(":", 1)[1]
    scheduler = subprocess.Popen(
        [console_script("scaler_scheduler"), f"tcp://0.0.0.0:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        lines = []
        for line in scheduler.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if "listening on" in line:
                break
    finally:
        scheduler.terminate()
        rest, _ = scheduler.communicate(timeout=30)
    output = "".join(lines) + rest
    assert "[WARNING]" in output and "without authentication" in output


def test_keys_must_come_in_pairs() -> None:
    with pytest.raises(ValueError, match="both"):
        Client(address="tcp://127.0.0.1:1", curve_server_key="/nonexistent.key")


def test_oversized_frames_disconnect_the_sender_and_others_carry_on(
    client: Client, combo: SchedulerClusterCombo
) -> None:
    context = zmq.Context()
    raw = context.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    try:
        raw.connect(combo.get_address())
        # A control frame far beyond the limit (the scheduler's default is 256 MiB): refused, not decoded.
        raw.send(b"\0" * (300 * 1024 * 1024))
        assert raw.poll(30_000), "no answer to an oversized control frame"
        reply = m.decode(raw.recv_multipart())
        assert isinstance(reply, m.ProtocolError) and "control frame" in reply.reason
    finally:
        raw.close()
        context.term()
    assert client.submit(abs, -4).result(timeout=60) == 4
