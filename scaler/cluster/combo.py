"""SchedulerClusterCombo: a scheduler and its workers on this machine, owned by this process."""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Sequence

from scaler.cluster.store_settings import StoreSettings
from scaler.errors import ClusterStartError
from scaler.scheduler.config import SchedulerConfig
from scaler.utility.ignored_settings import EVENT_LOOP, OBJECT_RETENTION_SECONDS, check_ignored_settings
from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS
from scaler.utility.parent_watch import environment_exiting_with_this_process
from scaler.utility.process_stop import stop_processes
from scaler.utility.readiness import FAILED, LISTENING, REGISTERED, ReadinessPipe
from scaler.utility.setting_rules import AT_LEAST_ONE, POSITIVE_SECONDS
from scaler.utility.zmq_config import zmq_address_text
from scaler.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

_STOP_GRACE_SECONDS = 10.0
DEFAULT_START_TIMEOUT_SECONDS = 60.0
# A free port found by free_local_address can be taken by someone else before the scheduler binds it.
_FREE_PORT_ATTEMPTS = 3


# WorkerConfig fields whose scaler_cluster option is not named after them (1.9.x names).
_WORKER_OPTION_NAMES = {
    "task_queue_size": "--per-worker-task-queue-size", "heartbeat_interval_seconds": "--heartbeat-interval",
}


def _setting_options(config: SchedulerConfig | WorkerConfig, option_names: dict[str, str] | None = None) -> list[str]:
    """Every numeric setting of a config as the command line option of its name: `--io-threads 1`, ...

    A float goes as its repr, so the child reads back exactly the value checked here.
    """
    options = []
    for field in dataclasses.fields(config):
        if "rule" in field.metadata:
            flag = (option_names or {}).get(field.name) or "--" + field.name.replace("_", "-")
            options += [flag, repr(getattr(config, field.name))]
    return options


def free_local_address() -> str:
    """A tcp address on loopback with a port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


class SchedulerClusterCombo:
    """Starts `scaler_scheduler` and `scaler_cluster` as child processes; `shutdown()` stops both.

    The constructor returns once the scheduler listens and every worker has registered with it. If
    either cannot happen (the address is taken, a process dies, `start_timeout_seconds` pass), it
    raises ClusterStartError naming the address and the cause, having stopped every process it started.
    The children log at WARNING unless told otherwise, so that a program using the combo is not
    flooded; they also exit on their own if this process dies, so nothing outlives its owner.
    `event_loop` and `object_retention_seconds` are accepted for Scaler 1.9.x code and have no effect.
    The cluster runs a store for its workers' objects (PROTOCOL.md §17) unless `store` is false;
    `store_capacity_bytes` None means 30% of this machine's memory.
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
        logging_level: str = "WARNING",
        start_timeout_seconds: float = DEFAULT_START_TIMEOUT_SECONDS,
        store: bool = True,
        store_capacity_bytes: int | None = None,
    ) -> None:
        for name, value, rule in (
            ("n_workers", n_workers, AT_LEAST_ONE), ("start_timeout_seconds", start_timeout_seconds, POSITIVE_SECONDS)
        ):
            try:
                rule.check(value)
            except (TypeError, ValueError) as error:
                raise type(error)(f"{name} {error}") from None
        # Accepted for 1.9.x code, checked, and without effect: the children are not told.
        check_ignored_settings(
            {"event_loop": event_loop, "object_retention_seconds": object_retention_seconds},
            (EVENT_LOOP, OBJECT_RETENTION_SECONDS),
        )
        if isinstance(logging_paths, str):
            logging_paths = (logging_paths,)
        self._chosen_address = address is None
        first_address = free_local_address() if address is None else zmq_address_text(address)
        # Every value is checked here, where it was given, before any process starts.
        scheduler_config = SchedulerConfig(
            address=first_address, io_threads=scheduler_io_threads,
            max_number_of_tasks_waiting=max_number_of_tasks_waiting, client_timeout_seconds=client_timeout_seconds,
            worker_timeout_seconds=worker_timeout_seconds, heartbeat_interval_seconds=heartbeat_interval_seconds,
            load_balance_seconds=load_balance_seconds,
            load_balance_trigger_times=load_balance_trigger_times, per_worker_queue_size=per_worker_queue_size,
            max_task_crashes=max_task_crashes, protected=protected,
            monitor_address=None if monitor_address is None else zmq_address_text(monitor_address),
            max_message_size_bytes=max_message_size_bytes, max_control_frame_bytes=max_control_frame_bytes,
            logging_paths=tuple(logging_paths), logging_level=logging_level,
        )
        worker_config = WorkerConfig(
            address=first_address, task_queue_size=per_worker_queue_size, max_processors=max_processors,
            heartbeat_interval_seconds=heartbeat_interval_seconds, death_timeout_seconds=death_timeout_seconds,
            task_timeout_seconds=task_timeout_seconds, memory_limit_bytes=memory_limit_bytes,
            io_threads=worker_io_threads, logging_paths=tuple(logging_paths), logging_level=logging_level,
        )
        # Checked here, where it was given, as the rest.
        self._store = StoreSettings(capacity_bytes=store_capacity_bytes) if store else None
        self._address = first_address
        self._n_workers = n_workers
        self._scheduler_config = scheduler_config
        self._worker_config = worker_config
        self._start_timeout_seconds = start_timeout_seconds
        self._lock = threading.Lock()
        self._processes: list[subprocess.Popen] = []
        self._environment = environment_exiting_with_this_process()
        atexit.register(self.shutdown)
        try:
            self._start_scheduler_and_cluster()
        except BaseException:
            self.shutdown()
            raise

    # ------------------------------------------------------------------------------------------ start

    def _start_scheduler_and_cluster(self) -> None:
        """With a port we chose, the cluster starts alongside the scheduler: its workers' connections wait for
        the scheduler to listen, and the two start-ups (each a Python process importing Scaler) overlap. At an
        address the user gave, the cluster starts only once the scheduler there is ours: its workers must not
        join someone else's scheduler that holds the port."""
        for attempt in range(1, _FREE_PORT_ATTEMPTS + 1):
            scheduler_pipe = ReadinessPipe()
            cluster_pipe = ReadinessPipe() if self._chosen_address else None
            try:
                scheduler = self._spawn("scaler.cli.scheduler", self._scheduler_args(), scheduler_pipe)
                cluster = None if cluster_pipe is None else self._spawn(
                    "scaler.cli.cluster", self._cluster_args(), cluster_pipe
                )
                try:
                    self._wait_for(scheduler_pipe, scheduler, LISTENING, "the scheduler")
                except ClusterStartError as error:
                    taken = "in use" in str(error).lower()
                    if taken and not self._chosen_address:
                        raise ClusterStartError(
                            f"{error}; is another scheduler running there? "
                            "Give another address, or none for a free port"
                        ) from None
                    if not (self._chosen_address and taken and attempt < _FREE_PORT_ATTEMPTS):
                        raise
                    # We chose that port and somebody took it meanwhile: choose again, for both.
                    with self._lock:
                        started, self._processes = self._processes, []
                    stop_processes(started[::-1], _STOP_GRACE_SECONDS)
                    self._address = free_local_address()
                    continue
                if cluster_pipe is None:
                    cluster_pipe = ReadinessPipe()
                    cluster = self._spawn("scaler.cli.cluster", self._cluster_args(), cluster_pipe)
                assert cluster is not None
                self._wait_for(cluster_pipe, cluster, REGISTERED, f"{self._n_workers} workers")
                return
            finally:
                scheduler_pipe.close()
                if cluster_pipe is not None:
                    cluster_pipe.close()

    def _spawn(self, module: str, args: list[str], pipe: ReadinessPipe) -> subprocess.Popen:
        with self._lock:
            process = subprocess.Popen(
                [sys.executable, "-m", module, *args], env=pipe.child_environment(self._environment),
                stdin=subprocess.DEVNULL, pass_fds=pipe.pass_fds,
            )
            self._processes.append(process)
        pipe.children_started()
        return process

    def _wait_for(self, pipe: ReadinessPipe, process: subprocess.Popen, ready_state: str, what: str) -> None:
        timeout = self._start_timeout_seconds
        deadline = time.monotonic() + timeout
        prefix = f"SchedulerClusterCombo: {what} at {self._address} did not start"
        while True:
            for report in pipe.read(min(0.2, max(0.0, deadline - time.monotonic()))):
                if report.state == ready_state:
                    return
                if report.state == FAILED:
                    raise ClusterStartError(f"{prefix}: {report.detail}")
            if pipe.closed_by_all or process.poll() is not None:
                for report in pipe.read(0.5):  # its last words, if they are still on the way
                    if report.state == FAILED:
                        raise ClusterStartError(f"{prefix}: {report.detail}")
                    if report.state == ready_state:
                        return
                try:
                    code = process.wait(timeout=_STOP_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    raise ClusterStartError(f"{prefix}: it stopped reporting before it was ready") from None
                raise ClusterStartError(f"{prefix}: its process exited with code {code} before it was ready")
            if time.monotonic() >= deadline:
                raise ClusterStartError(f"{prefix}: not ready within {timeout:g}s (start_timeout_seconds)")

    def _scheduler_args(self) -> list[str]:
        config = self._scheduler_config
        return [
            *_setting_options(config),
            "--protected" if config.protected else "--no-protected",
            *(["--monitor-address", config.monitor_address] if config.monitor_address else []),
            *self._logging_args(),
            "--", self._address,
        ]

    def _cluster_args(self) -> list[str]:
        return [
            "--num-of-workers", str(self._n_workers),
            *_setting_options(self._worker_config, _WORKER_OPTION_NAMES),
            *self._store_args(),
            *self._logging_args(),
            "--", self._address,
        ]

    def _store_args(self) -> list[str]:
        if self._store is None:
            return ["--no-store"]
        if self._store.capacity_bytes is None:
            return []
        return ["--store-capacity-bytes", str(self._store.capacity_bytes)]

    def _logging_args(self) -> list[str]:
        config = self._worker_config
        return ["--logging-paths", *config.logging_paths, "--logging-level", config.logging_level.upper()]

    # ------------------------------------------------------------------------------------------ use

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
        # The workers (and their store) first, then the scheduler: their goodbyes reach a scheduler still
        # there, and do not wait out their sockets' linger for one that is gone.
        for process in processes[::-1]:
            for late in stop_processes([process], _STOP_GRACE_SECONDS):
                logger.warning(f"SchedulerClusterCombo: process {late.pid} did not stop in time, killed it")
