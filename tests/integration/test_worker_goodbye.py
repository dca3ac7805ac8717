"""A worker told to stop says goodbye and ends its connection in order, even when every process of its cluster
gets SIGTERM at once, as when Slurm cancels the cluster's job (slurmd signals each process of the job): the
scheduler hears the goodbye and hands the worker's tasks to the others, and never sees the connection reset as
if the worker had died."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from scaler import Client
from scaler.cluster.cluster import Cluster
from scaler.ui.feed import MonitorSubscriber
from scaler.worker.config import WorkerConfig
from tests.conftest import child_python_environment, console_script
from tests.integration.scheduler_process import SchedulerProcess, wait_for_snapshot

pytestmark = pytest.mark.timeout(180)

WAIT_SECONDS = 60.0  # upper bounds against hangs on a loaded machine, never expectations
TASKS = 40
ARGUMENT_BYTES = 32 * 1024  # sent inline, in the task's message (under the 64 KiB that go through a store)


def size_of(argument: bytes) -> int:
    return len(argument)


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
    # Prefetch's pace off: the only worker takes every task at once.
    with SchedulerProcess(str(tmp_path), "--worker-queue-seconds", "0") as scheduler, \
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
            (agent,) = [pid for pid in _children(leaving.pid) if b"scaler.worker.agent" in _command(pid)]
            # Stopped, it reads none of the tasks the scheduler sends it, more than it reads at a time once it runs
            # again: they are what a Slurm-cancelled worker had not read yet (a message sent just as it stopped).
            os.kill(agent, signal.SIGSTOP)
            futures = [client.submit(size_of, bytes([value]) * ARGUMENT_BYTES) for value in range(TASKS)]
            wait_for_snapshot(
                monitor, lambda s: [w.assigned for w in s.workers] == [TASKS], WAIT_SECONDS,
                "every task sent to the leaving worker",
            )
            with Cluster(WorkerConfig(address=scheduler.address, logging_level="WARNING"), ["staying"]) as staying:
                staying.start()
                if signalled == "process group":  # the cluster, its store, its agent and its processor at once
                    _signal_group(leaving.pid, signal.SIGTERM)
                else:  # the agent alone; the cluster ends once its only worker has
                    os.kill(agent, signal.SIGTERM)
                _signal_group(leaving.pid, signal.SIGCONT)
                # Its goodbye hands its tasks to the staying worker.
                assert [future.result(timeout=WAIT_SECONDS) for future in futures] == [ARGUMENT_BYTES] * TASKS
                leaving.wait(WAIT_SECONDS)
                # Its agent's socket is closed now; after a round trip through the scheduler's loop, the scheduler
                # has read whatever the connection's end was (a reset is logged as soon as it is read).
                assert client.submit(size_of, b"x").result(timeout=WAIT_SECONDS) == 1
            deadline = time.monotonic() + WAIT_SECONDS
            while not (lines := leaving_lines(scheduler.log())) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
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


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return [int(child) for child in children.read().split()]


def _command(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as command:
        return command.read()
