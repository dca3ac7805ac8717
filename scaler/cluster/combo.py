"""SchedulerClusterCombo: a scheduler and its workers on this machine, owned by this process."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Sequence

from scaler.cli.common import EXIT_WITH_PARENT_ENV
from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS

logger = logging.getLogger(__name__)

_STOP_GRACE_SECONDS = 10.0


def free_local_address() -> str:
    """A tcp address on loopback with a port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


class SchedulerClusterCombo:
    """Starts `scaler_scheduler` and `scaler_cluster` as child processes; `shutdown()` stops both.

    The children also exit on their own if this process dies, so nothing outlives its owner.
    """

    def __init__(
        self,
        address: str | None = None,
        n_workers: int = os.cpu_count() or 1,
        event_loop: str = "builtin",
        *,
        monitor_address: str | None = None,
        protected: bool = True,
        per_worker_queue_size: int = 1000,
        max_number_of_tasks_waiting: int = -1,
        heartbeat_interval_seconds: float = 2.0,
        client_timeout_seconds: float = 60.0,
        worker_timeout_seconds: float = 60.0,
        death_timeout_seconds: float = 300.0,
        object_retention_seconds: float = 3600.0,
        task_timeout_seconds: float = 0.0,
        memory_limit_bytes: int = 0,
        load_balance_trigger_times: int = 2,
        load_balance_seconds: float = 1.0,
        max_task_crashes: int = 3,
        max_message_size_bytes: int = 4 * 1024**3,
        max_control_frame_bytes: int = 256 * 1024**2,
        max_processors: int = 64,
        scheduler_io_threads: int = 1,
        worker_io_threads: int = 1,
        logging_paths: Sequence[str] = DEFAULT_LOGGING_PATHS,
        logging_level: str = "INFO",
    ) -> None:
        if n_workers < 1:
            raise ValueError("n_workers must be at least 1")
        if event_loop not in ("builtin", "uvloop"):
            raise ValueError(f"event_loop must be 'builtin' or 'uvloop', got {event_loop!r}")
        self._address = address or free_local_address()
        logging_args = ["--logging-paths", *logging_paths, "--logging-level", logging_level]
        scheduler_args = [
            "--io-threads", str(scheduler_io_threads),
            "--max-number-of-tasks-waiting", str(max_number_of_tasks_waiting),
            "--client-timeout-seconds", str(client_timeout_seconds),
            "--worker-timeout-seconds", str(worker_timeout_seconds),
            "--heartbeat-interval-seconds", str(heartbeat_interval_seconds),
            "--object-retention-seconds", str(object_retention_seconds),
            "--load-balance-seconds", str(load_balance_seconds),
            "--load-balance-trigger-times", str(load_balance_trigger_times),
            "--per-worker-queue-size", str(per_worker_queue_size),
            "--max-task-crashes", str(max_task_crashes),
            "--max-message-size-bytes", str(max_message_size_bytes),
            "--max-control-frame-bytes", str(max_control_frame_bytes),
            "--event-loop", event_loop,
            "--protected" if protected else "--no-protected",
            *(["--monitor-address", monitor_address] if monitor_address else []),
            *logging_args,
            self._address,
        ]
        cluster_args = [
            "--num-of-workers", str(n_workers),
            "--per-worker-task-queue-size", str(per_worker_queue_size),
            "--max-processors", str(max_processors),
            "--heartbeat-interval", str(heartbeat_interval_seconds),
            "--death-timeout-seconds", str(death_timeout_seconds),
            "--task-timeout-seconds", str(task_timeout_seconds),
            "--memory-limit-bytes", str(memory_limit_bytes),
            "--io-threads", str(worker_io_threads),
            "--event-loop", event_loop,
            *logging_args,
            self._address,
        ]
        environment = dict(os.environ, **{EXIT_WITH_PARENT_ENV: str(os.getpid())})
        self._lock = threading.Lock()
        self._processes: list[subprocess.Popen] = []
        try:
            for module, args in (("scaler.cli.scheduler", scheduler_args), ("scaler.cli.cluster", cluster_args)):
                self._processes.append(subprocess.Popen(
                    [sys.executable, "-m", module, *args], env=environment, stdin=subprocess.DEVNULL
                ))
        except BaseException:
            self.shutdown()
            raise
        atexit.register(self.shutdown)

    def get_address(self) -> str:
        return self._address

    @property
    def scheduler_pid(self) -> int:
        return self._processes[0].pid

    @property
    def cluster_pid(self) -> int:
        return self._processes[1].pid

    def __enter__(self) -> SchedulerClusterCombo:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Stop the workers, then the scheduler, and reap both. Safe to call twice."""
        with self._lock:
            processes, self._processes = self._processes, []
        atexit.unregister(self.shutdown)
        for process in reversed(processes):  # workers first, so they leave the scheduler cleanly
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        for process in reversed(processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning(f"SchedulerClusterCombo: process {process.pid} did not stop in time, killing it")
                process.kill()
                process.wait()
