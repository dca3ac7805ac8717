"""Worker conformance: the welcome's size limits (PROTOCOL.md §4 "Welcome", §10). A frame over maxFrameBytes
or a control frame over maxControlFrameBytes would be lost without a word, so the worker checks first."""

from __future__ import annotations

import os

from tests.protocol import wire
from tests.protocol.conftest import StartWorker
from tests.protocol.dialects import Dialect
from tests.protocol.fake_scheduler import FakeScheduler


def test_a_result_over_the_frame_limit_fails_its_task(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect
) -> None:
    """§10: a result larger than maxFrameBytes becomes a `raised` PayloadTooLargeError of that task (not retried);
    the other results of the batch arrive."""
    start()
    link = scheduler.accept()
    link.welcome(maxFrameBytes=100_000)
    too_large, fine = link.submit(dialect, "echo", [(os.urandom(150_000),), (os.urandom(50_000),)])
    outcomes = link.outcomes(dialect, [too_large, fine])
    assert outcomes[too_large].kind == "raised"
    assert outcomes[too_large].type_name.endswith("PayloadTooLargeError")
    assert outcomes[fine].succeeded and len(outcomes[fine].value) == 50_000
    assert all(len(frame) <= 100_000 for message in link.result_messages for frame in message.frames)


def test_a_result_exactly_at_the_frame_limit_fails_its_task_and_one_byte_less_arrives(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect
) -> None:
    """§10: a result must stay under maxFrameBytes: one of exactly that size fails as PayloadTooLargeError too."""
    start()
    link = scheduler.accept()
    link.welcome(maxFrameBytes=100_000)
    [probe] = link.submit(dialect, "echo", [(bytes(70_000),)])
    assert link.outcomes(dialect, [probe])[probe].succeeded
    [payload] = wire.results_of(link.result_messages[-1])[0].values()
    at_limit = 100_000 - (len(payload) - 70_000)  # the worker's own framing of a bytes result
    too_large, fine = link.submit(dialect, "echo", [(os.urandom(at_limit),), (os.urandom(at_limit - 1),)])
    outcomes = link.outcomes(dialect, [too_large, fine])
    assert outcomes[too_large].kind == "raised"
    assert outcomes[too_large].type_name.endswith("PayloadTooLargeError")
    assert outcomes[fine].succeeded and len(outcomes[fine].value) == at_limit - 1


def test_results_are_split_under_the_control_frame_limit(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect
) -> None:
    """§10: inline results that together pass maxControlFrameBytes go in several taskResults, each under it."""
    start()
    link = scheduler.accept()
    limit = 64 * 1024
    link.welcome(maxControlFrameBytes=limit)
    values = [os.urandom(3000) for _ in range(100)]  # 300 kB of inline results
    task_ids = link.submit(dialect, "echo", [(value,) for value in values])
    outcomes = link.outcomes(dialect, task_ids)
    assert [outcomes[task_id].value for task_id in task_ids] == values
    assert len(link.result_messages) > 1
    assert all(len(message.frames[0]) <= limit for message in link.result_messages)
