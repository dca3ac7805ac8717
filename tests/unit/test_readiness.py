"""The readiness pipe between a parent and the children it starts, both ends in one process."""

from __future__ import annotations

import os

import pytest

from scaler.utility.readiness import FAILED, READY_FD_ENV, REGISTERED, ReadinessPipe, ReadinessReporter, Report


def test_reports_arrive_in_order_and_the_end_is_seen_once_every_child_closed(monkeypatch) -> None:
    pipe = ReadinessPipe()
    # A child holds its own copy of the write end, as one started with pass_fds=pipe.pass_fds does.
    child_copy = os.dup(pipe.pass_fds[0])
    monkeypatch.setenv(READY_FD_ENV, str(child_copy))
    child = ReadinessReporter.from_environment()
    assert child.active and READY_FD_ENV not in os.environ, "a child's own children must not inherit it"
    pipe.children_started()
    try:
        child.report(REGISTERED, "worker-a")
        child.report(FAILED, "worker-b: no scheduler\nanswered")  # one report stays one line
        assert pipe.read(5) == [Report(REGISTERED, "worker-a"), Report(FAILED, "worker-b: no scheduler answered")]
        assert not pipe.closed_by_all
        child.close()
        assert pipe.read(5) == [] and pipe.closed_by_all
        child.report(REGISTERED, "late")  # a closed reporter says nothing, and does not raise
    finally:
        pipe.close()


@pytest.mark.parametrize("value", ["", "not-a-number", "99999"])
def test_a_child_without_a_usable_pipe_reports_to_nobody(monkeypatch, value: str) -> None:
    monkeypatch.setenv(READY_FD_ENV, value)
    reporter = ReadinessReporter.from_environment()
    assert not reporter.active
    reporter.report(FAILED, "nobody hears this")
