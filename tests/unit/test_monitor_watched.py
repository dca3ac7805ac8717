"""The scheduler builds monitor snapshots only while someone subscribes to the feed.

With hundreds of workers a snapshot is hundreds of rows to gather and encode every second (about 15 ms
with 500 workers on a busy 2-core machine), in the scheduler's only thread; nobody watches most of the time.
"""

from __future__ import annotations

import time
from typing import Callable

import pytest
import zmq

from scaler.protocol.monitor_messages import MonitorSnapshot, WorkerStatus
from scaler.scheduler.monitor import MonitorPublisher
from scaler.ui.feed import MonitorSubscriber

SECONDS = 10.0


def _snapshot() -> MonitorSnapshot:
    return MonitorSnapshot(workers=[WorkerStatus(name=f"worker-{index}", capacity=10) for index in range(3)])


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never {what}")
        time.sleep(0.02)


@pytest.fixture
def publisher(tmp_path):
    context = zmq.Context()
    publisher = MonitorPublisher(context, f"ipc://{tmp_path}/monitor")
    try:
        yield publisher
    finally:
        publisher.close()
        context.term()


def test_snapshots_are_built_only_while_someone_subscribes(publisher: MonitorPublisher) -> None:
    built: list[MonitorSnapshot] = []

    def make() -> MonitorSnapshot:
        built.append(_snapshot())
        return built[-1]

    publisher.publish_if_watched(make)
    assert built == [] and not publisher.watched

    with MonitorSubscriber(publisher.address) as first, MonitorSubscriber(publisher.address) as second:
        _until(lambda: publisher.watched, "saw a subscription")
        publisher.publish_if_watched(make)
        assert len(built) == 1
        received = first.receive(SECONDS) or second.receive(SECONDS)  # the one whose subscription landed first
        assert received is not None and received.workers == built[0].workers
        first.close()
        time.sleep(0.2)
        assert publisher.watched  # one subscriber is still there

    _until(lambda: not publisher.watched, "saw the last subscriber go")
    publisher.publish_if_watched(make)
    assert len(built) == 1


def test_each_new_subscriber_is_answered_without_waiting_for_the_next_second(publisher: MonitorPublisher) -> None:
    """A notebook's summary subscribes, reads one snapshot and leaves: the scheduler's loop publishes at its next
    tick when someone new subscribed, also while another view already watches."""
    assert not publisher.newcomer_waiting
    with MonitorSubscriber(publisher.address) as first:
        _until(lambda: publisher.newcomer_waiting, "saw the first subscriber")
        publisher.publish(_snapshot())
        assert not publisher.newcomer_waiting
        assert first.receive(SECONDS) is not None
        with MonitorSubscriber(publisher.address) as second:
            _until(lambda: publisher.newcomer_waiting, "saw a second subscriber while the first watches")
            publisher.publish(_snapshot())
            assert second.receive(SECONDS) is not None
            assert not publisher.newcomer_waiting
