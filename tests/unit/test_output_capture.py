"""The processor's capture of a task's prints (output_capture.py), in this process: what it sends, and what it
leaves where it would have gone."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from scaler.protocol import messages as m
from scaler.worker.output_capture import TaskOutputCapture

pytestmark = pytest.mark.timeout(30)


def _sent_lines(sent: list[m.TaskOutput]) -> list[tuple[int, int, str]]:
    return [
        (task_id, stream, line)
        for output in sent for task_id, stream, text in zip(output.task_ids, output.streams, output.texts)
        for line in text.splitlines()
    ]


def test_prints_and_records_are_sent_and_the_streams_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    worker_err = io.StringIO()
    last_resort = logging.StreamHandler(worker_err)
    last_resort.setLevel(logging.WARNING)
    monkeypatch.setattr(logging, "lastResort", last_resort)
    stdout_before, stderr_before = sys.stdout, sys.stderr
    sent: list[m.TaskOutput] = []
    capture = TaskOutputCapture(sent.append)
    root = logging.getLogger()
    handlers = root.handlers[:]
    root.handlers.clear()  # as in a processor: nothing configured, so records reach the last resort
    try:
        capture.start(0x2A)
        print("one")
        print("two", file=sys.stderr)
        logging.getLogger("task.code").warning("careful")
        logging.getLogger("scaler.worker.processor").warning("the worker's own")
        capture.finish()
    finally:
        root.handlers[:] = handlers
    assert sys.stdout is stdout_before and sys.stderr is stderr_before and logging.lastResort is last_resort
    assert _sent_lines(sent) == [(0x2A, 0, "one"), (0x2A, 1, "two"), (0x2A, 2, "WARNING task.code: careful")]
    assert "the worker's own" in worker_err.getvalue() and "careful" not in worker_err.getvalue()
