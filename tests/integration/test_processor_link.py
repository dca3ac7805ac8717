"""The socketpair between a worker agent and each processor (utility/frame_stream.py) lives as long as the
processor: processors that die and are replaced leave no descriptor behind in their agent."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.errors import WorkerDiedError

pytestmark = pytest.mark.timeout(120)


def crash_processor() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_processors_that_die_leave_no_descriptor_in_their_agent() -> None:
    with SchedulerClusterCombo(n_workers=1, logging_level="CRITICAL", max_task_crashes=1) as cluster:
        with Client(address=cluster.get_address()) as client:
            assert client.submit(abs, -1).result(timeout=60) == 1
            (agent,) = (
                child for child in psutil.Process(cluster.cluster_pid).children(recursive=True)
                if "scaler.worker.agent" in " ".join(child.cmdline())
            )
            descriptors = agent.num_fds()
            for _ in range(4):
                with pytest.raises(WorkerDiedError):
                    client.submit(crash_processor).result(timeout=60)
            assert client.submit(abs, -2).result(timeout=60) == 2, "a new processor serves"
            assert agent.num_fds() == descriptors
