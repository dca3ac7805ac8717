"""How the client shows what tasks printed (task_output_display.py): each line prefixed, each stream to its place."""

from __future__ import annotations

import pytest

from scaler.client.task_output_display import show_task_output
from scaler.protocol import messages as m

pytestmark = pytest.mark.timeout(30)


def test_lines_are_prefixed_by_worker_and_task_and_go_to_their_stream(capsys: pytest.CaptureFixture[str]) -> None:
    show_task_output(m.TaskOutput(
        task_ids=[0x1A, 0x1A, 0x2B], streams=[0, 2, 1], texts=["one\ntwo\n", "WARNING w: careful\n", "oops\n"],
        worker="host|3",
    ))
    captured = capsys.readouterr()
    assert captured.out == "[host|3 task 0x1a] one\n[host|3 task 0x1a] two\n"
    assert captured.err == "[host|3 task 0x1a] WARNING w: careful\n[host|3 task 0x2b] oops\n"


def test_a_broken_stream_does_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def write(self, text: str) -> int:
            raise OSError("closed")

    monkeypatch.setattr("sys.stdout", Broken())
    show_task_output(m.TaskOutput(task_ids=[1], streams=[0], texts=["x\n"], worker="w"))
