"""Worker conformance: a worker outlives a scheduler that restarted (PROTOCOL.md §21).

The played scheduler welcomes the worker, then answers `refused{unknownPeer}` as a restarted one does. The
worker keeps running its tasks, says hello{rejoining} (again while no welcome comes) and nothing else, and
once welcomed sends the results it held and those no heartbeat echo acknowledged, then `reannounce`. An
implementation that leaves instead (allowed by §21) skips these; the Python and native workers must rejoin.
"""

from __future__ import annotations

import time

import pytest

from tests.protocol import wire
from tests.protocol.conftest import StartWorker
from tests.protocol.dialects import Dialect
from tests.protocol.fake_scheduler import REPLY_SECONDS, FakeScheduler, WorkerLink
from tests.protocol.peers import WorkerImplementation

EXIT_SECONDS = 30.0
UNKNOWN_PEER = "unknown peer: send hello first (or you were timed out)"


def lose(link: WorkerLink, implementation: WorkerImplementation) -> None:
    """Answer as a restarted scheduler does, and read the worker's hello{rejoining}."""
    link.send("refused", reason=UNKNOWN_PEER, unknownPeer=True)
    message = link.next()
    if message.member == "disconnect" and implementation.name == "external":
        pytest.skip("this worker leaves on refused{unknownPeer} instead of rejoining (allowed by §21)")
    assert message.member == "hello" and message.get("rejoining") is True, message.fields


def next_after_hellos(link: WorkerLink) -> wire.Received:
    """The next message that is not a (repeated) hello."""
    deadline = time.monotonic() + REPLY_SECONDS
    while (message := link.next(max(0.0, deadline - time.monotonic()))).member == "hello":
        pass
    return message


def succeeded_ids(message: wire.Received) -> list[int]:
    assert message.member == "taskResults", f"expected taskResults, got {message.member}: {message.fields}"
    successes, failures = wire.results_of(message)
    assert failures == []
    return sorted(successes)


def test_results_made_while_unknown_wait_for_the_welcome_and_come_before_the_reannouncement(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect, implementation: WorkerImplementation
) -> None:
    """§21: the task runs on; only hellos go while no welcome comes; once welcomed, the results made meanwhile
    come first, then `reannounce` naming the tasks still unanswered: each task is in exactly one of the two."""
    start()
    link = scheduler.accept()
    link.welcome()
    tasks = link.submit(dialect, "sleep_ms", [(300,), (300,)])
    link.pause(0.2)  # the first started
    lose(link, implementation)
    meanwhile = link.quiet_for(1.5)  # (on an idle machine) both end meanwhile
    assert {message.member for message in meanwhile} <= {"hello"}, [message.member for message in meanwhile]
    assert all(message.get("rejoining") is True for message in meanwhile)
    link.welcome()
    held: list[int] = []
    while (message := next_after_hellos(link)).member != "reannounce":
        held += succeeded_ids(message)
    reannounced = message.get("taskIds", [])
    assert sorted(held + reannounced) == tasks, (held, reannounced)
    if reannounced:
        assert sorted(link.outcomes(dialect, reannounced)) == reannounced


def test_results_no_echo_acknowledged_are_sent_again_after_the_rejoin(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect, implementation: WorkerImplementation
) -> None:
    """§21: results sent after the last echoed heartbeat may have died with the scheduler: sent again."""
    start()
    link = scheduler.accept()
    link.welcome(heartbeatIntervalMs=100)
    link.answer_heartbeats = False
    task, = link.submit(dialect, "echo", [(7,)])
    assert succeeded_ids(link.next()) == [task]
    lose(link, implementation)
    link.welcome()
    assert succeeded_ids(next_after_hellos(link)) == [task]
    assert link.expect("reannounce").get("taskIds", []) == []


def test_results_an_echo_acknowledged_are_not_sent_again(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect, implementation: WorkerImplementation
) -> None:
    """§21: the echo of a heartbeat sent after a result acknowledges it; the next scheduler gets only the
    re-announcement."""
    start()
    link = scheduler.accept()
    link.welcome(heartbeatIntervalMs=100)
    task, = link.submit(dialect, "echo", [(7,)])
    assert link.outcomes(dialect, [task])[task].value == 7
    link.wait_heartbeats(len(link.heartbeats) + 1)  # sent after the result, and echoed before what comes next
    lose(link, implementation)
    link.welcome()
    assert next_after_hellos(link).member == "reannounce"


def test_a_running_task_is_reannounced_and_answered_once(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect, implementation: WorkerImplementation
) -> None:
    """§21: a task still running at the welcome is named by `reannounce`, and answered once, after it."""
    start()
    link = scheduler.accept()
    link.welcome()
    running, = link.submit(dialect, "sleep_ms", [(3000,)])  # long: still running at the welcome, even under load
    link.pause(0.2)
    lose(link, implementation)
    link.welcome()
    reannounced = next_after_hellos(link)
    assert reannounced.member == "reannounce" and reannounced.get("taskIds") == [running], reannounced.fields
    assert link.outcomes(dialect, [running])[running].value == 3000


def test_hello_again_while_no_welcome_comes(
    start: StartWorker, scheduler: FakeScheduler, implementation: WorkerImplementation
) -> None:
    """§21: a hello that found no scheduler (lost on a connection that dropped again) is repeated."""
    start()
    link = scheduler.accept()
    link.welcome()
    lose(link, implementation)
    again = link.next()
    assert again.member == "hello" and again.get("rejoining") is True, again.fields


def test_a_refusal_of_the_hello_again_is_final_with_status_1(
    start: StartWorker, scheduler: FakeScheduler, implementation: WorkerImplementation
) -> None:
    """§21: a refused without unknownPeer answers the hello itself (another cluster's scheduler, another
    protocol version): the worker cannot work with it and exits with status 1."""
    process = start()
    link = scheduler.accept()
    link.welcome()
    lose(link, implementation)
    link.send("refused", reason="protocol version 1 not supported, scheduler speaks 2")
    assert process.wait_exit(EXIT_SECONDS) == 1
    assert "protocol version 1 not supported" in process.log()


def test_a_rejoining_worker_gives_up_at_its_death_timeout(
    start: StartWorker, scheduler: FakeScheduler, implementation: WorkerImplementation
) -> None:
    """§21, §5: no welcome comes, so the worker leaves at its death timeout, as when no scheduler answers
    at all (status 0: it was welcomed once)."""
    process = start(death_timeout=1.5)
    link = scheduler.accept()
    link.welcome()
    lose(link, implementation)
    assert process.wait_exit(EXIT_SECONDS) == 0
