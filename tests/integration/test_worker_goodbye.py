"""A worker told to stop says goodbye and ends its connection in order, even when every process of its cluster
gets SIGTERM at once, as when Slurm cancels the cluster's job (slurmd signals each process of the job): the
scheduler hears the goodbye and hands the worker's tasks to the others, and never sees the connection reset as
if the worker had died; and the task its processor was running when the same SIGTERM ended it is not blamed."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import time

import psutil
import pytest

from scaler import Client
from scaler.cluster.cluster import Cluster
from scaler.ui.feed import MonitorSubscriber
from scaler.worker.config import WorkerConfig
from tests.conftest import child_python_environment, console_script
from tests.integration.scheduler_process import SchedulerProcess, wait_for_snapshot
from tests.integration.waiting import wait_for_file

pytestmark = pytest.mark.timeout(180)

WAIT_SECONDS = 60.0  # upper bounds against hangs on a loaded machine, never expectations
TASKS = 40
GATE_LIMIT_SECONDS = 90.0  # an upper bound against a hang: the test opens the gate long before
ARGUMENT_BYTES = 32 * 1024  # sent inline, in the task's message (under the 64 KiB that go through a store)


def size_of(argument: bytes) -> int:
    return len(argument)


def gated(started: str, gate: str) -> str:
    """Runs until the test opens the gate, having said that it runs."""
    pathlib.Path(started).touch()
    wait_for_file(gate, GATE_LIMIT_SECONDS)
    return "done"


def leaving_lines(log: str) -> list[str]:
    """What the scheduler logged of the leaving worker's departure and of its connection's end."""
    return [
        line for line in log.splitlines()
        if re.search(r"PeerRegistry: worker leaving (disconnected|lost its connection|timed out)", line)
        or "ZMTP router: closing b'W|leaving|" in line
    ]


@pytest.mark.parametrize("signalled", ["process group", "agent"])
def test_a_worker_sigtermed_with_its_whole_cluster_says_goodbye_and_its_tasks_go_on(tmp_path, signalled) -> None:
    environment = child_python_environment()
    environment.pop("SCALER_EXIT_WITH_PARENT", None)
    started, gate = str(tmp_path / "started"), str(tmp_path / "gate")
    # Prefetch's pace off: the only worker takes every task at once. One crash fails a task: a task blamed for a
    # processor that died of the same SIGTERM as its agent would fail.
    with SchedulerProcess(str(tmp_path), "--worker-queue-seconds", "0", "--max-task-crashes", "1") as scheduler, \
            MonitorSubscriber(scheduler.monitor_address) as monitor, \
            Client(scheduler.address, timeout_seconds=WAIT_SECONDS) as client, \
            open(tmp_path / "leaving.log", "wb") as output:
        # Its own process group, as a Slurm job's processes are its own: the test signals all of them at once.
        leaving = subprocess.Popen(
            [console_script("scaler_cluster"), scheduler.address, "-n", "1", "--worker-names", "leaving"],
            stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment,
            start_new_session=True,
        )
        try:
            wait_for_snapshot(monitor, lambda s: len(s.workers) == 1, WAIT_SECONDS, "the leaving worker registered")
            (agent,) = [p.pid for p in psutil.Process(leaving.pid).children() if _runs(p, "scaler.worker.agent")]
            running = client.submit(gated, started, gate)
            wait_for_file(started, WAIT_SECONDS)
            # Stopped, it reads none of the tasks the scheduler sends it, more than it reads at a time once it runs
            # again: they are what a Slurm-cancelled worker had not read yet (a message sent just as it stopped).
            os.kill(agent, signal.SIGSTOP)
            futures = [client.submit(size_of, bytes([value]) * ARGUMENT_BYTES) for value in range(TASKS)]
            wait_for_snapshot(
                monitor, lambda s: [w.assigned for w in s.workers] == [TASKS + 1], WAIT_SECONDS,
                "every task sent to the leaving worker",
            )
            with Cluster(WorkerConfig(address=scheduler.address, logging_level="WARNING"), ["staying"]) as staying:
                staying.start()
                if signalled == "process group":  # the cluster, its store, its agent and its processor at once
                    _signal_group(leaving.pid, signal.SIGTERM)
                    # Its processor, which was running a task, exits before its (stopped) agent sees either.
                    wait_until_exited(leaving.pid, "scaler.worker.processor")
                else:  # the agent alone; the cluster ends once its only worker has
                    os.kill(agent, signal.SIGTERM)
                pathlib.Path(gate).touch()
                _signal_group(leaving.pid, signal.SIGCONT)
                # Its goodbye hands its tasks to the staying worker.
                assert [future.result(timeout=WAIT_SECONDS) for future in futures] == [ARGUMENT_BYTES] * TASKS
                assert running.result(timeout=WAIT_SECONDS) == "done"
                assert leaving.wait(WAIT_SECONDS) == 0, (tmp_path / "leaving.log").read_text()
                # Its agent's socket is closed now; after a round trip through the scheduler's loop, the scheduler
                # has read whatever the connection's end was (a reset is logged as soon as it is read).
                assert client.submit(size_of, b"x").result(timeout=WAIT_SECONDS) == 1
            deadline = time.monotonic() + WAIT_SECONDS
            while not (lines := leaving_lines(scheduler.log())) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            pathlib.Path(gate).touch()  # whatever happened, no gated task waits past the test
            if leaving.poll() is None:
                _signal_group(leaving.pid, signal.SIGKILL)
                leaving.wait()
    # Its goodbye, and nothing else: not a connection reset, as by a process that died, nor a lost connection.
    assert len(lines) == 1 and "PeerRegistry: worker leaving disconnected" in lines[0], "\n".join(lines)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # every process of the group has exited


def wait_until_exited(group: int, module: str) -> None:
    """Until no process of this group runs `module` (a zombie has exited: its parent has not reaped it yet)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while any(_runs(process, module) and process.status() != psutil.STATUS_ZOMBIE for process in _members(group)):
        assert time.monotonic() < deadline, f"{module} still runs after {WAIT_SECONDS:g}s"
        time.sleep(0.05)


def _members(group: int) -> list[psutil.Process]:
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group:
                members.append(process)
        except ProcessLookupError:
            pass
    return members


def _runs(process: psutil.Process, module: str) -> bool:
    try:
        return module in process.cmdline()
    except psutil.Error:
        return False
