"""What tasks print reaches the client (Client(stream_output=True)), and a bare Client() inside a task.

A real scheduler and workers; the client's sys.stdout and sys.stderr are pytest's capture, which the client's
I/O thread writes into (it looks the streams up at each write).
"""

from __future__ import annotations

import logging
import re
import sys
import time

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.utility.scheduler_address import ADDRESS_ENVIRONMENT_VARIABLE


def chatty(count: int) -> int:
    for index in range(count):
        print(f"line {index}")
    print("to stderr", file=sys.stderr)
    logging.getLogger("chatty.task").warning("a warning from the task")
    return count


def flood(seconds: float) -> str:
    line = "x" * 100
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        print(line)
    return "done"


def add_one(value: int) -> int:
    return value + 1


def nested_sum(values: list[int]) -> int:
    with Client() as inner:  # no address: the scheduler this task came from
        return sum(inner.map(add_one, [(value,) for value in values]))


def _lines_of(text: str, task_hex: str) -> list[str]:
    prefix = re.compile(r"^\[[^\]]+ task " + task_hex + r"\] (.*)$")
    return [match.group(1) for line in text.splitlines() if (match := prefix.match(line))]


def _wait_for(capsys: pytest.CaptureFixture[str], predicate, seconds: float = 10.0) -> tuple[str, str]:
    """Output is written by the client's I/O thread before the result it precedes; wait for a late line anyway."""
    out, err = "", ""
    deadline = time.monotonic() + seconds
    while True:
        captured = capsys.readouterr()
        out, err = out + captured.out, err + captured.err
        if predicate(out, err) or time.monotonic() > deadline:
            return out, err
        time.sleep(0.05)


@pytest.fixture(scope="module")
def combo() -> SchedulerClusterCombo:
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as cluster:
        yield cluster


def test_prints_and_logs_reach_the_client_prefixed_and_in_order(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(address=combo.get_address(), timeout_seconds=30, stream_output=True) as client:
        future = client.submit(chatty, 20)
        task_hex = f"{future.task_id:#x}" if hasattr(future, "task_id") else r"0x[0-9a-f]+"
        assert future.result(timeout=30) == 20
        out, err = _wait_for(capsys, lambda out, err: "a warning from the task" in err)
    assert _lines_of(out, task_hex) == [f"line {index}" for index in range(20)]
    err_lines = _lines_of(err, task_hex)
    assert err_lines == ["to stderr", "WARNING chatty.task: a warning from the task"]


def test_a_task_printing_in_a_loop_is_bounded_and_the_client_learns_the_drop(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(address=combo.get_address(), timeout_seconds=30, stream_output=True) as client:
        assert client.submit(flood, 1.0).result(timeout=30) == "done"
        out, err = _wait_for(capsys, lambda out, err: "bytes of output dropped" in err)
    kept = _lines_of(out, r"0x[0-9a-f]+")
    assert kept and all(line == "x" * 100 for line in kept)
    # 1 s of a 64 KiB/s budget with a 64 KiB burst: far less than the loop printed.
    assert len(kept) * 101 <= 200 * 1024
    notices = [line for line in _lines_of(err, r"0x[0-9a-f]+") if "bytes of output dropped" in line]
    assert notices
    dropped = sum(int(re.search(r"\.\.\. ([\d,]+) bytes", line).group(1).replace(",", "")) for line in notices)
    assert dropped > 0


def test_without_stream_output_nothing_arrives(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(address=combo.get_address(), timeout_seconds=30) as client:
        assert client.submit(chatty, 3).result(timeout=30) == 3
        # A task that streams, after it, shows the link works: had the first sent anything, it came before.
        with Client(address=combo.get_address(), timeout_seconds=30, stream_output=True) as streaming:
            assert streaming.submit(chatty, 1).result(timeout=30) == 1
            out, err = _wait_for(capsys, lambda out, err: "a warning from the task" in err)
    assert _lines_of(out, r"0x[0-9a-f]+") == ["line 0"]


def test_a_bare_client_inside_a_task_finds_its_scheduler(
    combo: SchedulerClusterCombo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ADDRESS_ENVIRONMENT_VARIABLE, raising=False)
    with Client(address=combo.get_address(), timeout_seconds=30) as client:
        assert client.submit(nested_sum, [1, 2, 3]).result(timeout=60) == 9


def test_a_bare_client_outside_a_task_says_how_to_give_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ADDRESS_ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.delenv("SCALER_TASK_SCHEDULER_ADDRESS", raising=False)
    with pytest.raises(ValueError, match="SCALER_ADDRESS"):
        Client()


def test_a_bare_client_uses_scaler_address(combo: SchedulerClusterCombo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ADDRESS_ENVIRONMENT_VARIABLE, combo.get_address())
    with Client(timeout_seconds=30) as client:
        assert client.address == combo.get_address()
        assert client.submit(add_one, 1).result(timeout=30) == 2


def _streamed_lines(capsys: pytest.CaptureFixture[str], expected: int) -> list[str]:
    out, _ = _wait_for(capsys, lambda out, err: len(_lines_of(out, r"0x[0-9a-f]+")) >= expected)
    return _lines_of(out, r"0x[0-9a-f]+")


def test_the_executor_streams_when_asked(combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]) -> None:
    from scaler.compat.futures import ScalerExecutor

    with ScalerExecutor(combo.get_address()) as quiet:
        assert quiet.submit(chatty, 1).result(timeout=30) == 1
    with ScalerExecutor(combo.get_address(), stream_output=True) as executor:
        assert list(executor.map(chatty, [2, 2])) == [2, 2]
    assert sorted(_streamed_lines(capsys, 4)) == ["line 0", "line 0", "line 1", "line 1"]


def test_the_joblib_backend_streams_when_asked(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    from joblib import Parallel, delayed, parallel_config

    from scaler.compat.cluster_choice import use

    with Client(address=combo.get_address(), timeout_seconds=30) as client, use(client):
        with parallel_config(backend="scaler", n_jobs=2):
            assert Parallel()(delayed(chatty)(1) for _ in range(2)) == [1, 1]
        with parallel_config(backend="scaler", n_jobs=2, stream_output=True):
            assert Parallel()(delayed(chatty)(2) for _ in range(2)) == [2, 2]
    assert sorted(_streamed_lines(capsys, 4)) == ["line 0", "line 0", "line 1", "line 1"]


def test_dask_streams_through_scaler_get_when_asked(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    dask = pytest.importorskip("dask")
    import scaler
    from scaler.compat.cluster_choice import use

    with use(combo.get_address()):
        assert dask.compute(dask.delayed(chatty)(1), scheduler=scaler.get) == (1,)
        assert dask.compute(dask.delayed(chatty)(3), scheduler=scaler.get, stream_output=True) == (3,)
    assert _streamed_lines(capsys, 3) == ["line 0", "line 1", "line 2"]


def print_then_wait_for(marker: str) -> str:
    import os

    print("waiting for the marker")
    deadline = time.monotonic() + 30
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    print("saw it")
    return "ok"


def test_lines_arrive_while_the_task_still_runs(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    marker = tmp_path / "marker"
    with Client(address=combo.get_address(), timeout_seconds=30, stream_output=True) as client:
        future = client.submit(print_then_wait_for, str(marker))
        out, _ = _wait_for(capsys, lambda out, err: "waiting for the marker" in out, seconds=20)
        assert not future.done()  # the line came while the task waited: it did not wait for the task's end
        marker.touch()
        assert future.result(timeout=30) == "ok"
        later, _ = _wait_for(capsys, lambda out, err: "saw it" in out)
    assert _lines_of(out + later, r"0x[0-9a-f]+") == ["waiting for the marker", "saw it"]


def _late_print(text: str) -> None:
    time.sleep(0.1)  # past the flush interval: a capture that sent from here would send now
    print(text)


def print_from_a_forked_child(path: str) -> str:
    """Prints, and forks a child that prints, with the processor's descriptor 1 on `path` meanwhile."""
    import multiprocessing
    import os

    print("from the task")
    saved, file = os.dup(1), os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(file, 1)
    try:
        child = multiprocessing.get_context("fork").Process(target=_late_print, args=("from the child",))
        child.start()
        child.join(30)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(file)
    print("after the child")
    with open(path) as written:
        return written.read()


def test_a_forked_child_does_not_write_into_the_tasks_link(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    """A child the task forks must not send on the processor's socket: its prints go to the worker's output."""
    with Client(address=combo.get_address(), timeout_seconds=30, stream_output=True) as client:
        assert "from the child" in client.submit(print_from_a_forked_child, str(tmp_path / "fd1")).result(timeout=60)
        assert client.submit(chatty, 1).result(timeout=30) == 1  # the worker's link still works
        out, _ = _wait_for(capsys, lambda out, err: "a warning from the task" in err)
    assert _lines_of(out, r"0x[0-9a-f]+") == ["from the task", "after the child", "line 0"]


def configures_logging() -> str:
    root = logging.getLogger()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s|%(name)s|%(message)s", force=True)
    try:
        logging.getLogger("configured").info("an info record")
    finally:  # the processor serves the other tests of this module after this one
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
    return "ok"


def test_a_task_that_sets_up_logging_keeps_its_format(
    combo: SchedulerClusterCombo, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(address=combo.get_address(), timeout_seconds=30, stream_output=True) as client:
        assert client.submit(configures_logging).result(timeout=30) == "ok"
        _, err = _wait_for(capsys, lambda out, err: "an info record" in err)
    assert "INFO|configured|an info record" in _lines_of(err, r"0x[0-9a-f]+")
