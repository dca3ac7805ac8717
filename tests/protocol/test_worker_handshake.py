"""Worker conformance: the handshake, heartbeats and the ways a worker leaves (PROTOCOL.md §4, §5, §8, §14).

Each test plays the scheduler on a ROUTER it binds and starts the worker under test as a process.
"""

from __future__ import annotations

import signal
import time

from tests.protocol import wire
from tests.protocol.conftest import StartWorker, Worker
from tests.protocol.dialects import Dialect
from tests.protocol.fake_scheduler import FakeScheduler

EXIT_SECONDS = 30.0


def test_hello_comes_first_and_says_worker_version_and_capacity(start: StartWorker, scheduler: FakeScheduler) -> None:
    """§4: the first message is hello{protocolVersion=1, role=worker, capacity=N}; §1: a routing identity is set."""
    start(name="hello-test", capacity=7)
    link = scheduler.accept()
    hello = link.hello.fields
    assert hello.get("protocolVersion") == wire.PROTOCOL_VERSION
    assert hello.get("role") == "worker"
    assert hello.get("capacity") == 7
    assert hello.get("name") == "hello-test"
    assert hello.get("pid", 0) > 0 and hello.get("hostname")
    assert link.identity


def test_hello_advertises_the_operators_tags_and_the_payloads_it_reads(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect
) -> None:
    """§4, §16: hello.tags holds every --tags tag, and "native" (neutral payloads) or "python" (the Python
    client's): the scheduler sends a worker only tasks whose required tags it has."""
    start(name="tags-test", tags="gpu,fast")
    hello = scheduler.accept().hello.fields
    own = "python" if dialect.name == "python" else "native"
    assert sorted(hello.get("tags", [])) == sorted({"gpu", "fast", own})


def test_two_workers_have_different_identities(start: StartWorker, scheduler: FakeScheduler) -> None:
    """§1: one unique identity per peer, even for two workers with the same name on one host."""
    start(name="twin")
    start(name="twin")
    first, second = scheduler.accept(), scheduler.accept()
    assert first.identity != second.identity


def test_heartbeats_at_the_interval_the_welcome_asks(start: StartWorker, scheduler: FakeScheduler) -> None:
    """§5: once welcomed, a worker whose own interval is 60 s heartbeats at the welcome's 50 ms instead."""
    start(heartbeat_interval=60)
    link = scheduler.accept()
    link.welcome(heartbeatIntervalMs=50)
    link.wait_heartbeats(4)  # on its own interval, a second one would take a minute
    assert all(beat.get("queuedTasks", 0) == 0 for _, beat in link.heartbeats)


def test_heartbeats_within_a_third_of_the_peer_timeout(start: StartWorker, scheduler: FakeScheduler) -> None:
    """§5: the interval is also at most a third of peerTimeoutMs (here 150 ms -> every 50 ms)."""
    start(heartbeat_interval=60)
    link = scheduler.accept()
    link.welcome(heartbeatIntervalMs=60000, peerTimeoutMs=150)
    link.wait_heartbeats(4)


def test_heartbeats_at_the_rarer_interval_an_echo_asks(start: StartWorker, scheduler: FakeScheduler) -> None:
    """PROTOCOL.md, "Heartbeats spaced out at scale": an echo's heartbeatIntervalMs holds even when longer than the
    worker's own interval, and an echo of 0 brings back the welcome's."""
    start(heartbeat_interval=0.05)
    link = scheduler.accept()
    link.welcome(heartbeatIntervalMs=50)
    link.wait_heartbeats(3)
    link.echo_fields = {"heartbeatIntervalMs": 3_000}
    link.wait_heartbeats(len(link.heartbeats) + 1)  # its echo asks for 3 s
    asked_at = time.monotonic()
    link.pause(1.5)
    # At its own 50 ms, about 30 more; at the asked 3 s at most two: one may have crossed the echo on the way, and
    # the first at the new interval comes at a random fraction of it after the last (its phase, heartbeat_pace.py).
    assert len([at for at, _ in link.heartbeats if at > asked_at]) <= 2, link.heartbeats
    link.echo_fields = {}
    link.wait_heartbeats(len(link.heartbeats) + 5)  # the next echo says 0: every 50 ms again


def test_refused_before_welcome_exits_with_failure(start: StartWorker, scheduler: FakeScheduler) -> None:
    """§4: a worker refused for its version stops (status 1: it never got to work, README.md of the suite)."""
    process = start()
    link = scheduler.accept()
    link.send("refused", reason="protocol version 1 not supported, scheduler speaks 2")
    assert process.wait_exit(EXIT_SECONDS) == 1


def test_refused_after_welcome_exits(start: StartWorker, scheduler: FakeScheduler) -> None:
    """§5, "After refused": a scheduler that no longer knows the worker; it says goodbye and exits (status 0)."""
    process = start()
    link = scheduler.accept()
    link.welcome()
    link.send("refused", reason="unknown peer: send hello first (or you were timed out)")
    assert process.wait_exit(EXIT_SECONDS) == 0


def test_disconnect_from_the_scheduler_makes_the_worker_leave(worker: Worker) -> None:
    """§8 "When to stop", §14 step 5: on the scheduler's disconnect the worker says disconnect and exits."""
    worker.link.send("disconnect", reason="scheduler is shutting down")
    goodbye = worker.link.expect("disconnect")
    assert goodbye.get("reason")
    assert worker.process.wait_exit(EXIT_SECONDS) == 0


def test_sigterm_leaves_with_a_disconnect(worker: Worker) -> None:
    """§8 "Leaving": however it stops, the worker tells the scheduler, so its tasks are requeued at once."""
    worker.link.wait_heartbeats(1)
    worker.process.signal(signal.SIGTERM)
    worker.link.expect("disconnect")
    assert worker.process.wait_exit(EXIT_SECONDS) == 0


def test_silent_scheduler_past_the_death_timeout(start: StartWorker, scheduler: FakeScheduler) -> None:
    """§5 "The peers' timeouts": heartbeats go unanswered, so the worker gives up after its death timeout."""
    process = start(death_timeout=1.5)
    link = scheduler.accept()
    link.welcome(heartbeatIntervalMs=100)
    link.answer_heartbeats = False
    goodbye = link.next(EXIT_SECONDS)  # heartbeats only, then its disconnect
    assert goodbye.member == "disconnect"
    assert process.wait_exit(EXIT_SECONDS) == 0


def test_no_scheduler_at_all_exits_with_failure(start: StartWorker, scheduler: FakeScheduler) -> None:
    """§5: the death timeout runs from the hello, so a worker nobody answers exits too, with status 1."""
    process = start(death_timeout=1.5)
    scheduler.accept()  # hello received, never answered
    assert process.wait_exit(EXIT_SECONDS) == 1


def test_refused_as_an_unknown_peer_after_welcome_rejoins_or_leaves(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect
) -> None:
    """§21: a scheduler that restarted answers refused{unknownPeer}. A worker that rejoins says hello{rejoining}
    again, and once welcomed re-announces the tasks it holds before it sends anything else, then their
    results (the Python and native workers; test_worker_rejoin.py has the details); one that does not rejoin
    says goodbye and exits with status 0."""
    process = start()
    link = scheduler.accept()
    link.welcome()
    running, = link.submit(dialect, "sleep_ms", [(1000,)])
    link.pause(0.3)  # it started
    link.send("refused", reason="unknown peer: send hello first (or you were timed out)", unknownPeer=True)
    message = link.next()
    if message.member == "disconnect":
        assert process.wait_exit(EXIT_SECONDS) == 0
        return
    assert message.member == "hello" and message.get("rejoining") is True, message.fields
    link.welcome()
    assert link.expect("reannounce").get("taskIds") == [running]
    assert link.outcomes(dialect, [running])[running].value == 1000
