"""Connection problems told within seconds (handshake_failures.py): the diagnosis from events, then real sockets
of this process showing each problem to a HandshakeWatch."""

from __future__ import annotations

import shutil
import time
from typing import Callable, Iterator

import pytest
import zmq
import zmq.auth

from scaler.utility.handshake_failures import HandshakeDiagnosis, HandshakeWatch

ADDRESS = "tcp://127.0.0.1:2345"


def diagnosis(secured: bool = False, silence_seconds: float | None = None) -> HandshakeDiagnosis:
    return HandshakeDiagnosis(ADDRESS, "the scheduler", "worker", secured, 100.0, silence_seconds, "try the other one")


def test_a_refused_key_is_told_once_until_a_handshake_succeeds() -> None:
    watched = diagnosis(secured=True)
    assert watched.on_event(zmq.EVENT_CONNECTED, 0) == []
    (told,) = watched.on_event(zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400)
    assert told.startswith(f"the scheduler at {ADDRESS} refused this worker's key (CURVE authentication failed")
    assert "authorized keys" in told and watched.problem == told
    assert watched.on_event(zmq.EVENT_DISCONNECTED, 0) == []  # the failure said it all
    assert watched.on_event(zmq.EVENT_CONNECTED, 0) == []
    assert watched.on_event(zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400) == []  # ZeroMQ retries: not told again
    assert watched.on_event(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0) == [] and watched.problem == ""
    assert watched.on_event(zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400) == [told]  # a new failure after a success


def test_each_kind_of_failure_says_what_to_check() -> None:
    mismatch = zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
    (plain,) = diagnosis(secured=False).on_event(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, mismatch)
    assert "requires CURVE keys" in plain and "SCALER_CURVE_SERVER_KEY" in plain
    (keyed,) = diagnosis(secured=True).on_event(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, mismatch)
    assert "does not use CURVE" in keyed
    (wrong_server_key,) = diagnosis(secured=True).on_event(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, 32)
    assert "could not read this worker's CURVE hello" in wrong_server_key and "--curve-server-key" in wrong_server_key
    watched = diagnosis()
    watched.on_event(zmq.EVENT_CONNECTED, 0)
    (dropped,) = watched.on_event(zmq.EVENT_DISCONNECTED, 0)
    assert dropped == f"{ADDRESS} answers, but not as the scheduler: try the other one"
    plain_peer = HandshakeDiagnosis(ADDRESS, "a monitor feed", "viewer", False, 0.0, None, "try another", True)
    assert plain_peer.on_event(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, mismatch) == [
        f"{ADDRESS} answers, but not as a monitor feed: try another"
    ]


def test_silence_is_told_after_its_time_unless_something_connected() -> None:
    watched = diagnosis(silence_seconds=3.0)
    assert watched.on_tick(102.9) == []
    (silent,) = watched.on_tick(103.0)
    assert silent == (
        f"nothing answers at {ADDRESS} yet (still trying): is the scheduler running, and is this its address?"
    )
    assert watched.on_tick(110.0) == []
    connected = diagnosis(silence_seconds=3.0)
    connected.on_event(zmq.EVENT_CONNECTED, 0)
    assert connected.on_tick(200.0) == []
    assert diagnosis(silence_seconds=None).on_tick(1e9) == []


# ------------------------------------------------------------------------------------------ real sockets


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    made = zmq.Context()
    try:
        yield made
    finally:
        made.destroy(linger=0)


def problems_of(watch: HandshakeWatch, until: Callable[[list[str]], bool], seconds: float = 10.0) -> list[str]:
    problems: list[str] = []
    deadline = time.monotonic() + seconds
    while not until(problems) and time.monotonic() < deadline:
        time.sleep(0.05)
        problems.extend(watch.poll(time.monotonic()))
    return problems


def test_a_curve_peer_whose_key_is_not_authorized_is_told_so(context: zmq.Context, tmp_path) -> None:
    from zmq.auth.thread import ThreadAuthenticator

    keys, authorized = tmp_path / "keys", tmp_path / "authorized"
    authorized.mkdir()
    keys.mkdir()
    for name in ("scheduler", "friend", "stranger"):
        zmq.auth.create_certificates(str(keys), name)
    shutil.copy(keys / "friend.key", authorized)
    authenticator = ThreadAuthenticator(context)
    authenticator.start()
    try:
        authenticator.configure_curve(domain="*", location=str(authorized))
        server = context.socket(zmq.ROUTER)
        server_public, server.curve_secretkey = zmq.auth.load_certificate(str(keys / "scheduler.key_secret"))
        server.curve_publickey = server_public
        server.curve_server = True
        address = f"tcp://127.0.0.1:{server.bind_to_random_port('tcp://127.0.0.1')}"
        for name, refused in (("stranger", True), ("friend", False)):
            peer = context.socket(zmq.DEALER)
            peer.curve_serverkey = server_public
            peer.curve_publickey, peer.curve_secretkey = zmq.auth.load_certificate(str(keys / f"{name}.key_secret"))
            watch = HandshakeWatch(peer, address, time.monotonic(), role="worker", secured=True)
            peer.connect(address)
            problems = problems_of(watch, lambda found: bool(found), seconds=10.0 if refused else 1.0)
            assert [problem.split(" (")[0] for problem in problems] == (
                [f"the scheduler at {address} refused this worker's key"] if refused else []
            )
            watch.close()
            peer.close(linger=0)
    finally:
        authenticator.stop()


def test_a_sub_at_a_router_and_a_missing_peer_are_told_apart(context: zmq.Context, tmp_path) -> None:
    router = context.socket(zmq.ROUTER)
    address = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    for target, expected in (
        (address, f"{address} answers, but not as the monitor"),
        (f"ipc://{tmp_path}/nobody", f"nothing answers at ipc://{tmp_path}/nobody yet (still trying)"),
    ):
        subscriber = context.socket(zmq.SUB)
        watch = HandshakeWatch(subscriber, target, time.monotonic(), peer="the monitor", silence_seconds=0.5)
        subscriber.connect(target)
        (problem,) = problems_of(watch, lambda found: bool(found))
        assert problem.startswith(expected)
        watch.close()
        subscriber.close(linger=0)
