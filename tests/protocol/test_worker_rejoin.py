"""Worker conformance: a scheduler that restarted (PROTOCOL.md §21). The worker hears `refused{unknownPeer}`,
says hello{rejoining} and nothing else until a welcome; then it sends what it held back (its results made
meanwhile, and those no heartbeat echo acknowledged), and last its `reannounce`. A worker that does not rejoin
leaves instead (test_worker_handshake.py checks that): these tests are skipped for it."""

from __future__ import annotations

import pytest

from tests.protocol import wire
from tests.protocol.conftest import StartWorker
from tests.protocol.dialects import Dialect
from tests.protocol.fake_scheduler import FakeScheduler, WorkerLink

UNKNOWN = "unknown peer: send hello first (or you were timed out)"


def lose_scheduler(link: WorkerLink) -> None:
    """The restarted scheduler's answer to the worker; the worker must then say hello{rejoining}, or leave."""
    link.send("refused", reason=UNKNOWN, unknownPeer=True)
    message = link.next()
    if message.member == "disconnect":
        pytest.skip("this worker leaves a scheduler that restarted instead of rejoining (§21 allows it)")
    assert message.member == "hello" and message.get("rejoining") is True, message.fields


def succeeded_ids(message: wire.Received) -> list[int]:
    assert message.member == "taskResults", f"expected taskResults, got {message.member}: {message.fields}"
    return list(wire.results_of(message)[0])


def test_results_made_while_unknown_are_held_until_the_welcome_and_precede_the_reannounce(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect
) -> None:
    start()
    link = scheduler.accept()
    link.welcome()
    finishing, = link.submit(dialect, "sleep_ms", [(800,)])
    link.pause(0.1)
    lose_scheduler(link)
    # No welcome for a while: the task finishes meanwhile, and the worker sends nothing but hellos.
    meanwhile = link.quiet_for(1.8)
    assert {message.member for message in meanwhile} <= {"hello"}, [message.member for message in meanwhile]
    assert all(message.get("rejoining") is True for message in meanwhile)
    link.welcome()
    assert succeeded_ids(link.next()) == [finishing]
    assert link.expect("reannounce").get("taskIds", []) == []


def test_results_no_echo_acknowledged_are_sent_again_and_the_reannounce_names_what_runs(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect
) -> None:
    """The old scheduler may have died before it read them: without an echo of a later heartbeat, the worker
    cannot know it did (§21, item 1). The task still running is re-announced, and its result follows."""
    start()
    link = scheduler.accept()
    link.welcome(heartbeatIntervalMs=200)
    link.answer_heartbeats = False
    quick, = link.submit(dialect, "echo", [(7,)])
    assert link.outcomes(dialect, [quick])[quick].value == 7
    running, = link.submit(dialect, "sleep_ms", [(1500,)])
    link.pause(0.3)
    lose_scheduler(link)
    link.welcome()
    assert succeeded_ids(link.next()) == [quick]
    assert link.expect("reannounce").get("taskIds", []) == [running]
    message = link.next()
    assert succeeded_ids(message) == [running] and wire.results_of(message)[0][running] == dialect.encode(1500)
