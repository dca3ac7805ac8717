"""A Cluster: N worker processes on this machine, started, watched and stopped together."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Sequence

from scaler.cli.common import EXIT_WITH_PARENT_ENV
from scaler.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

_STOP_GRACE_SECONDS = 5.0


class Cluster:
    """Owns its worker processes: `start()` launches them, `shutdown()` stops and reaps every one."""

    def __init__(self, worker_template: WorkerConfig, worker_names: Sequence[str]) -> None:
        if not worker_names:
            raise ValueError("a cluster needs at least one worker")
        self._template = worker_template
        self._worker_names = list(worker_names)
        self._processes: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    @property
    def worker_pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def start(self) -> None:
        template = self._template
        logger.info(
            f"ClusterProcess: starting {len(self._worker_names)} workers, "
            f"heartbeat_interval_seconds={template.heartbeat_interval_seconds:g}, "
            f"task_queue_size={template.task_queue_size}"
        )
        environment = dict(os.environ, **{EXIT_WITH_PARENT_ENV: str(os.getpid())})
        with self._lock:
            for index, name in enumerate(self._worker_names):
                config = dataclasses.replace(template, name=name)
                process = subprocess.Popen(
                    [sys.executable, "-m", "scaler.worker.agent", json.dumps(dataclasses.asdict(config))],
                    env=environment,
                    stdin=subprocess.DEVNULL,
                )
                self._processes.append(process)
                logger.info(f"Worker[{index}] started")

    def all_exited(self) -> bool:
        return all(process.poll() is not None for process in self._processes)

    def shutdown(self) -> None:
        with self._lock:
            processes, self._processes = self._processes, []
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        for process in processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def default_worker_names(count: int, prefix: str | None = None) -> list[str]:
    import socket

    host = prefix or socket.gethostname().split(".")[0]
    return [f"{host}|{index}" for index in range(count)]
