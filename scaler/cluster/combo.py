"""SchedulerClusterCombo: a scheduler and its workers on this machine, owned by this process."""

from __future__ import annotations

import atexit
import logging
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

from scaler.cluster.display import combo_html, combo_text
from scaler.cluster.settings import CLUSTER, COMBO_OWN, combo_keywords
from scaler.errors import ClusterStartError
from scaler.scheduler.settings import SCHEDULER
from scaler.utility.monitor_address import default_monitor_address
from scaler.utility.parent_watch import environment_exiting_with_this_process
from scaler.utility.process_stop import stop_processes
from scaler.utility.readiness import FAILED, LISTENING, REGISTERED, ReadinessPipe
from scaler.utility.setting_rules import POSITIVE_SECONDS
from scaler.utility.zmq_config import zmq_address_text
from scaler.worker.config import LIBRARY_LOGGING_LEVEL

logger = logging.getLogger(__name__)

_STOP_GRACE_SECONDS = 10.0
DEFAULT_START_TIMEOUT_SECONDS = 60.0
# A free port found by free_local_address can be taken by someone else before the scheduler binds it.
_FREE_PORT_ATTEMPTS = 3
# Each keyword the combo takes and the options of the scheduler's and the cluster's tables it sets.
_ROUTES = combo_keywords()


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

    Every other option of `scaler_scheduler` and `scaler_cluster` is a keyword too, by its name with
    underscores (`bad_frame_log_seconds=...`, `tags=["gpu"]`, `input_wait_seconds=...`); where both have
    one of the same name, `scheduler_` or `worker_` says which (`worker_curve_secret_key=...`). See
    scaler/cluster/settings.py, `combo_keywords`.
    """

    def __init__(
        self,
        address: str | None = None,
        n_workers: int = CLUSTER["num_of_workers"].default,
        event_loop: str = SCHEDULER["event_loop"].default,
        *,
        monitor_address: str | None = None,
        protected: bool = SCHEDULER["protected"].default,
        per_worker_queue_size: int = SCHEDULER["per_worker_queue_size"].default,
        max_number_of_tasks_waiting: int = SCHEDULER["max_number_of_tasks_waiting"].default,
        heartbeat_interval_seconds: float = SCHEDULER["heartbeat_interval_seconds"].default,
        client_timeout_seconds: float = SCHEDULER["client_timeout_seconds"].default,
        worker_timeout_seconds: float = SCHEDULER["worker_timeout_seconds"].default,
        death_timeout_seconds: float = CLUSTER["death_timeout_seconds"].default,
        object_retention_seconds: float = SCHEDULER["object_retention_seconds"].default,
        task_timeout_seconds: float = CLUSTER["task_timeout_seconds"].default,
        memory_limit_bytes: int = CLUSTER["memory_limit_bytes"].default,
        load_balance_trigger_times: int = SCHEDULER["load_balance_trigger_times"].default,
        load_balance_seconds: float = SCHEDULER["load_balance_seconds"].default,
        max_task_crashes: int = SCHEDULER["max_task_crashes"].default,
        max_message_size_bytes: int = SCHEDULER["max_message_size_bytes"].default,
        max_control_frame_bytes: int = SCHEDULER["max_control_frame_bytes"].default,
        max_processors: int = CLUSTER["max_processors"].default,
        scheduler_io_threads: int = SCHEDULER["io_threads"].default,
        worker_io_threads: int = CLUSTER["io_threads"].default,
        logging_paths: Sequence[str] = SCHEDULER["logging_paths"].default,
        logging_level: str = LIBRARY_LOGGING_LEVEL,
        start_timeout_seconds: float = DEFAULT_START_TIMEOUT_SECONDS,
        store: bool = CLUSTER["store"].default,
        store_capacity_bytes: int | None = CLUSTER["store_capacity_bytes"].default,
        **settings: Any,
    ) -> None:
        given = {name: value for name, value in locals().items() if name not in ("self", "settings")}
        unknown = sorted(set(settings) - set(_ROUTES))
        if unknown:
            raise TypeError(f"SchedulerClusterCombo() got unexpected keyword arguments {unknown}")
        given.update(settings)
        try:
            POSITIVE_SECONDS.check(start_timeout_seconds)
        except (TypeError, ValueError) as error:
            raise type(error)(f"start_timeout_seconds {error}") from None
        if isinstance(given["logging_paths"], str):
            given["logging_paths"] = (given["logging_paths"],)
        # Every value is checked here, where it was given, before any process starts; the 1.9.x keywords that
        # have no effect too, and go no further.
        self._scheduler_values: dict[str, Any] = {}
        self._cluster_values: dict[str, Any] = {}
        for keyword, value in given.items():
            if keyword not in _ROUTES or keyword in COMBO_OWN:
                continue
            targets = _ROUTES[keyword]
            if value is not None or targets[0][1].default is not None:
                try:  # a shared keyword meets the rule of each option it sets
                    value = [option.rule.check(value) for _, option in targets][0]
                except (TypeError, ValueError) as error:
                    raise type(error)(f"{keyword} {error}") from None
            for table, option in targets:
                if option.ignored is None and value != option.default:
                    values = self._scheduler_values if table is SCHEDULER else self._cluster_values
                    values[option.name] = value
        self._chosen_address = address is None
        self._address = free_local_address() if address is None else zmq_address_text(address)
        self._n_workers = given["n_workers"]
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
        return SCHEDULER.command_line({**self._scheduler_values, "address": self._address})

    def _cluster_args(self) -> list[str]:
        return CLUSTER.command_line({**self._cluster_values, "address": self._address})

    # ------------------------------------------------------------------------------------------ use

    def get_address(self) -> str:
        return self._address

    def __repr__(self) -> str:
        return combo_text(*self._display_facts())

    def _repr_html_(self) -> str:
        """Jupyter's view: the scheduler and workers started, and, from one look at the monitor feed, the
        cluster's workers and tasks."""
        return combo_html(*self._display_facts())

    def _display_facts(self) -> tuple[str, str, int, bool, int]:
        scheduler_values = getattr(self, "_scheduler_values", {})
        address = getattr(self, "_address", "?")
        monitor_address = scheduler_values.get("monitor_address") or default_monitor_address(address)
        processes = list(getattr(self, "_processes", ()))
        running = bool(processes) and all(process.poll() is None for process in processes)
        return address, monitor_address, getattr(self, "_n_workers", 0), running, scheduler_values.get(
            "metrics_port", 0
        )

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
