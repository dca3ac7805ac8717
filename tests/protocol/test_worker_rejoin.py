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


def next_after_hellos(link: WorkerLink) -> wire.Received:
    """The next message but the hellos the worker sent again before our welcome reached it."""
    while (message := link.next()).member == "hello":
        pass
    return message


def test_results_made_while_unknown_are_held_until_the_welcome_and_precede_the_reannounce(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect
) -> None:
    """A task that ends while no scheduler knows the worker: its result waits for the welcome, and comes before
    the reannounce, which does not name it. (One that has not ended by the welcome, on a loaded machine, is
    named by the reannounce, and its result follows: the order holds either way.)"""
    start()
    link = scheduler.accept()
    link.welcome()
    task_id, = link.submit(dialect, "sleep_ms", [(1000,)])
    link.pause(0.2)  # it starts (or, on a loaded machine, will soon)
    lose_scheduler(link)
    # No welcome for a while: the task ends meanwhile, and the worker sends nothing but hellos.
    meanwhile = link.quiet_for(2.0)
    assert {message.member for message in meanwhile} <= {"hello"}, [message.member for message in meanwhile]
    assert all(message.get("rejoining") is True for message in meanwhile)
    link.welcome()
    first = next_after_hellos(link)
    if first.member == "taskResults":
        assert succeeded_ids(first) == [task_id]
        assert link.expect("reannounce").get("taskIds", []) == []
    else:
        assert first.member == "reannounce" and first.get("taskIds") == [task_id], first.fields
        assert succeeded_ids(link.next()) == [task_id]


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
    running, = link.submit(dialect, "sleep_ms", [(3000,)])
    link.pause(0.2)
    lose_scheduler(link)
    link.welcome()
    assert succeeded_ids(next_after_hellos(link)) == [quick]
    assert link.expect("reannounce").get("taskIds", []) == [running]
    message = link.next()
    assert succeeded_ids(message) == [running] and wire.results_of(message)[0][running] == dialect.encode(3000)
