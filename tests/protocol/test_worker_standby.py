"""Worker conformance: several scheduler addresses, and a standby scheduler (PROTOCOL.md §23).

The worker is given two played schedulers, `FIRST,SECOND` (one comma-separated argument, in rank order). A
scheduler that stands by answers `refused{standby}`: the worker connects to the next address (wrapping around)
and says hello there: its first hello if no scheduler welcomed it yet, else `hello{rejoining}`, then what it
held and `reannounce` once welcomed, as after a restart (§21). A scheduler silent for the worker's threshold is
left the same way. A refusal is no word from a scheduler that serves: the death timeout runs on. An
implementation that takes one address only fails these (`-k "not standby"` leaves them out).
"""

from __future__ import annotations

import time
from typing import Iterator

import pytest
import zmq

from tests.protocol import wire
from tests.protocol.conftest import StartWorker, played_scheduler
from tests.protocol.dialects import Dialect
from tests.protocol.fake_scheduler import REPLY_SECONDS, FakeScheduler, WorkerLink
from tests.protocol.peers import PeerProcess
from tests.protocol.test_worker_rejoin import EXIT_SECONDS, next_after_hellos

STANDBY = "standby scheduler: the scheduler at tcp://elsewhere serves this cluster; try the next address"
HELLO_TWICE = "a worker may not send Hello; this connection is registered already (hello sent twice)"


@pytest.fixture
def second() -> Iterator[FakeScheduler]:
    """The scheduler ranked second, played by the test too."""
    yield from played_scheduler()


def stand_by(link: WorkerLink) -> None:
    link.send("refused", reason=STANDBY, standby=True)


def start_with_both(start: StartWorker, first: FakeScheduler, second: FakeScheduler, **options: object) -> PeerProcess:
    return start(address=f"{first.address},{second.address}", **options)


def test_refused_as_standby_before_a_welcome_the_worker_says_its_first_hello_at_the_next_address(
    start: StartWorker, scheduler: FakeScheduler, second: FakeScheduler, dialect: Dialect
) -> None:
    process = start_with_both(start, scheduler, second)
    first = scheduler.accept()
    assert not first.hello.get("rejoining")
    stand_by(first)
    served = second.accept()
    assert not served.hello.get("rejoining"), "no scheduler had welcomed it: nothing to rejoin"
    served.welcome()
    task, = served.submit(dialect, "echo", [(7,)])
    assert served.outcomes(dialect, [task])[task].value == 7
    assert process.process.poll() is None


def test_a_welcomed_worker_refused_as_standby_rejoins_the_next_with_its_running_task(
    start: StartWorker, scheduler: FakeScheduler, second: FakeScheduler, dialect: Dialect
) -> None:
    """A standby that served steps down (§23): its workers rejoin the next address as after a restart."""
    start_with_both(start, scheduler, second)
    first = scheduler.accept()
    first.welcome()
    running, = first.submit(dialect, "sleep_ms", [(3000,)])  # long: still running at the next welcome, under load
    first.pause(0.2)
    stand_by(first)
    served = second.accept()
    assert served.hello.get("rejoining") is True, served.hello.fields
    served.welcome()
    reannounced = next_after_hellos(served)
    assert reannounced.member == "reannounce" and reannounced.get("taskIds") == [running], reannounced.fields
    assert served.outcomes(dialect, [running])[running].value == 3000


def test_a_silent_scheduler_is_left_for_the_next_address(
    start: StartWorker, scheduler: FakeScheduler, second: FakeScheduler, dialect: Dialect
) -> None:
    """Its host gone: no echo, no word at all. The worker tries the next address well within its death timeout."""
    start_with_both(start, scheduler, second, heartbeat_interval=0.2, death_timeout=60.0)
    first = scheduler.accept()
    first.welcome(heartbeatIntervalMs=200)
    task, = first.submit(dialect, "echo", [(5,)])
    assert first.outcomes(dialect, [task])[task].value == 5
    first.answer_heartbeats = False
    served = second.accept(timeout=REPLY_SECONDS)
    assert served.hello.get("rejoining") is True, served.hello.fields
    served.welcome()
    # The result again if no echo acknowledged it before the silence (§21), then the re-announcement: no task.
    while (message := next_after_hellos(served)).member == "taskResults":
        assert list(wire.results_of(message)[0]) == [task]
    assert message.member == "reannounce" and message.get("taskIds", []) == [], message.fields


def test_refused_by_standbys_at_every_address_the_worker_still_leaves_at_its_death_timeout(
    start: StartWorker, scheduler: FakeScheduler, second: FakeScheduler
) -> None:
    """A refusal is no word from a scheduler that serves: a worker no scheduler serves exits (status 1, never
    welcomed), having tried both addresses."""
    process = start_with_both(start, scheduler, second, death_timeout=3.0)
    hellos = {scheduler.address: 0, second.address: 0}
    deadline = time.monotonic() + EXIT_SECONDS
    while process.process.poll() is None:
        assert time.monotonic() < deadline, f"the worker did not exit; its log:\n{process.log()}"
        for played in (scheduler, second):
            while played.socket.poll(0, zmq.POLLIN):
                identity, *frames = played.socket.recv_multipart()
                if wire.read(frames).member == "hello":
                    hellos[played.address] += 1
                played.socket.send_multipart([identity, wire.build("refused", reason=STANDBY, standby=True)])
        time.sleep(0.02)
    assert process.wait_exit(EXIT_SECONDS) == 1, process.log()
    assert all(count >= 1 for count in hellos.values()), hellos


def test_back_at_a_scheduler_that_still_has_it_the_worker_leaves_it_and_says_hello_again(
    start: StartWorker, scheduler: FakeScheduler, second: FakeScheduler
) -> None:
    """§23: moved away and back before the first scheduler dropped it, its hello is one too many there. It says
    `disconnect` (the scheduler drops it), then hello{rejoining} again, and rejoins."""
    start_with_both(start, scheduler, second)
    first = scheduler.accept()
    first.welcome()
    stand_by(first)
    elsewhere = second.accept()
    assert elsewhere.hello.get("rejoining") is True
    stand_by(elsewhere)  # round the list, back to the first
    back = first.next()
    assert back.member == "hello" and back.get("rejoining") is True, back.fields
    first.send("protocolError", reason=HELLO_TWICE)
    assert next_after_hellos(first).member == "disconnect"
    again = first.next()
    assert again.member == "hello" and again.get("rejoining") is True, again.fields
    first.welcome()
    assert next_after_hellos(first).member == "reannounce"
