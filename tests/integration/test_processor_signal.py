"""A real processor process, with this test as its agent: a signal during a task makes it answer a cancel of
a queued task at once, even when the signal overtakes the cancel (the agent sends the message first, but
nothing makes it arrive first)."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time
from typing import Iterator

import pytest

from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer
from scaler.utility.frame_stream import FrameStream
from scaler.utility.identifiers import content_object_id
from scaler.worker.agent_signal import AGENT_SIGNAL
from scaler.worker.running_task_slot import RunningTaskSlot, create_slot
from tests.integration.waiting import wait_until

IDENTITY = b"P0"
FIRST_TASK_ID = 1 << 40
# How long a gated task waits for its gate at most, so that a failing test cannot leave it running.
GATE_LIMIT_SECONDS = 20.0
# An upper bound against hangs; the assertion is that the answer comes while the blocker still runs.
ANSWER_SECONDS = 10.0


def gated(gate: str, started: str) -> str:
    pathlib.Path(started).touch()
    deadline = time.monotonic() + GATE_LIMIT_SECONDS
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return "ran"


class PlayedAgent:
    """The agent's side of one processor: its end of their socketpair, the processor's slot and process."""

    def __init__(self, directory: pathlib.Path, link_timeout_seconds: float = 300.0, stderr: int | None = None) -> None:
        ours, theirs = socket.socketpair()
        self.link = FrameStream(ours)
        slot_path = str(directory / "slot")
        create_slot(slot_path)
        self.slot = RunningTaskSlot(slot_path)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "scaler.worker.processor", str(theirs.fileno()), IDENTITY.decode(), slot_path,
                 str(os.getpid()), "5", repr(link_timeout_seconds)],
                stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), stderr=stderr, text=True,
            )

    def receive(self, timeout: float) -> m.Message:
        assert self.link.wait_for_input(timeout), f"nothing from the processor within {timeout:g}s"
        return m.decode(self.link.receive())

    def send(self, message: m.Message) -> None:
        self.link.send_all(m.encode(message))

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.send(m.Disconnect())
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        finally:
            self.slot.close()
            self.link.close()


@pytest.fixture
def agent(tmp_path: pathlib.Path) -> Iterator[PlayedAgent]:
    played = PlayedAgent(tmp_path)
    try:
        yield played
    finally:
        (tmp_path / "gate").touch()
        played.close()


def submission(task_ids: list[int], gate: pathlib.Path, started: pathlib.Path) -> m.TaskSubmission:
    function = DefaultSerializer.serialize(gated)
    function_id = content_object_id(function)
    args = [DefaultSerializer.serialize(str(path)) for _ in task_ids for path in (gate, started)]
    group = m.TaskGroup(function_id=function_id, args_per_task=2, keywords=(), task_ids=task_ids, args=args)
    return m.TaskSubmission(objects=[m.ObjectPayload(function_id, function)], groups=[group])


def assert_canceled_while_the_blocker_runs(agent: PlayedAgent, queued: int, gate: pathlib.Path) -> None:
    answer = agent.receive(ANSWER_SECONDS)
    assert not gate.exists()
    assert isinstance(answer, m.TaskResults)
    assert [(failure.task_id, failure.kind) for failure in answer.failures] == [(queued, m.FailureKind.CANCELED)]
    assert answer.succeeded_ids == [], "answered while the blocker still runs"


def test_a_signal_that_overtakes_its_cancel_still_answers_the_cancel_during_the_task(
    agent: PlayedAgent, tmp_path: pathlib.Path
) -> None:
    assert isinstance(agent.receive(30), m.Hello)
    gate, started = tmp_path / "gate", tmp_path / "started"
    blocker, queued, later = FIRST_TASK_ID, FIRST_TASK_ID + 1, FIRST_TASK_ID + 2
    agent.send(submission([blocker, queued], gate, started))
    wait_until(started.exists, "the blocker started", timeout=30)
    assert agent.slot.read() == blocker

    # Unread while the blocker runs: a task for the queue, then the signal, and only then its cancel.
    agent.send(submission([later], gate, tmp_path / "started_later"))
    time.sleep(0.2)  # the submission is in the processor's socket before the signal
    agent.slot.announce_urgent_sent(1)
    os.kill(agent.process.pid, AGENT_SIGNAL)
    time.sleep(0.1)  # the handler has found the submission, and waits on
    agent.send(m.CancelTasks(task_ids=[queued]))

    assert_canceled_while_the_blocker_runs(agent, queued, gate)

    gate.touch()
    done: list[int] = []
    deadline = time.monotonic() + ANSWER_SECONDS
    while len(done) < 2:
        results = agent.receive(max(0.1, deadline - time.monotonic()))
        if isinstance(results, m.TaskResults):
            assert not results.failures
            done += results.succeeded_ids
    assert done == [blocker, later]


def test_a_signal_that_comes_between_tasks_before_its_cancel_is_answered_once_the_next_task_runs(
    agent: PlayedAgent, tmp_path: pathlib.Path
) -> None:
    """The agent signals when the slot names a task it has no answer for yet, which includes one that has just
    ended: the processor may be between tasks, its last read of the socket done before the cancel arrived."""
    assert isinstance(agent.receive(30), m.Hello)
    gate, started = tmp_path / "gate", tmp_path / "started"
    blocker, queued = FIRST_TASK_ID, FIRST_TASK_ID + 1
    agent.slot.announce_urgent_sent(1)
    os.kill(agent.process.pid, AGENT_SIGNAL)  # idle: nothing can be read now
    time.sleep(0.1)
    agent.send(submission([blocker, queued], gate, started))
    time.sleep(0.1)  # the processor has read the submission and started the blocker
    agent.send(m.CancelTasks(task_ids=[queued]))

    assert_canceled_while_the_blocker_runs(agent, queued, gate)
    gate.touch()
    results = agent.receive(ANSWER_SECONDS)
    assert isinstance(results, m.TaskResults) and results.succeeded_ids == [blocker]
