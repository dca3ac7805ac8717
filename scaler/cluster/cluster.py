"""A Cluster: N worker processes on this machine and the store of their objects, started, watched and stopped
together: the store first and last, since the workers keep their large data in it."""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import math
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Iterable, Sequence

from scaler.cluster.settings import CLUSTER, CLUSTER_KEYWORDS
from scaler.cluster.store_settings import StoreSettings, default_data_address
from scaler.errors import ClusterStartError
from scaler.store.server_config import StoreStartError
from scaler.store.store_process import StoreProcess
from scaler.utility.ignored_settings import check_ignored_settings
from scaler.utility.monitor_address import default_monitor_address
from scaler.utility.parent_watch import environment_exiting_with_this_process
from scaler.utility.process_stop import stop_processes
from scaler.utility.readiness import FAILED, REGISTERED, ReadinessPipe
from scaler.utility.scheduler_addresses import join_scheduler_addresses, parse_scheduler_addresses
from scaler.utility.setting_rules import POSITIVE_SECONDS
from scaler.utility.tags import checked_tags
from scaler.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

_STOP_GRACE_SECONDS = 5.0
DEFAULT_START_TIMEOUT_SECONDS = 60.0
# While workers wait for their welcome: the first warning, then one at this interval.
_FIRST_WARNING_SECONDS = 5.0
_WARNING_INTERVAL_SECONDS = 30.0
_WATCH_SECONDS = 0.2

# Keywords of the Scaler 1.9.x Cluster (a multiprocessing.Process), every worker option's name and field's, and
# the WorkerConfig field each sets (see settings.py).
_LEGACY_KEYWORDS = CLUSTER_KEYWORDS
# Keywords of the 1.9.x Cluster that change nothing here: checked, then dropped.
_IGNORED_LEGACY_KEYWORDS = {option.name: option.ignored for option in CLUSTER if option.ignored is not None}


class Cluster:
    """Owns its worker processes: `start()` launches them and returns once every one has registered with
    the scheduler; `shutdown()` (or `terminate()` then `join()`) stops and reaps every one.

    Made either from a template and names, `Cluster(WorkerConfig(address=...), ["a", "b"])`, or with the
    keywords of Scaler 1.9.x, `Cluster(address=..., worker_names=[...], heartbeat_interval_seconds=...,
    ...)`. `start()` raises ClusterStartError (having stopped every worker) when a worker cannot join:
    it gave up (no scheduler answered within `death_timeout_seconds`, or the scheduler refused it), it
    died, or not all registered within `start_timeout_seconds`.

    Before its workers it starts their store (`store`, see store_settings.py; None: no store) and waits
    until it listens; the workers name it to the scheduler. It stops the store after the workers.
    """

    def __init__(
        self,
        worker_config: WorkerConfig | Any = None,
        worker_names: Sequence[str] | None = None,
        *,
        address: Any = None,
        start_timeout_seconds: float = DEFAULT_START_TIMEOUT_SECONDS,
        tags: Iterable[str] | None = None,
        store: StoreSettings | None = StoreSettings(),
        **legacy_settings: Any,
    ) -> None:
        if worker_config is not None and not isinstance(worker_config, WorkerConfig):
            if address is not None:
                raise TypeError("Cluster() got the address twice")
            address, worker_config = worker_config, None  # Cluster(address, worker_names=..., ...) as in 1.9.x
        if worker_config is None:
            worker_config = _config_from_legacy_keywords(address, legacy_settings)
        elif address is not None or legacy_settings:
            given = sorted({*legacy_settings, *(["address"] if address is not None else [])})
            raise TypeError(f"Cluster() takes a WorkerConfig or the 1.9.x keywords, not both: got {given} too")
        if not worker_config.address:
            raise ValueError("Cluster() needs the scheduler's address, e.g. tcp://127.0.0.1:2345")
        if isinstance(worker_names, str) or worker_names is None or not all(isinstance(n, str) for n in worker_names):
            raise TypeError(f"worker_names must be a list of names (str), one per worker, got {worker_names!r}")
        if not worker_names:
            raise ValueError("a cluster needs at least one worker (worker_names is empty)")
        try:
            POSITIVE_SECONDS.check(start_timeout_seconds)
        except (TypeError, ValueError) as error:
            raise type(error)(f"start_timeout_seconds {error}") from None
        if tags is not None:  # TypeError or ValueError here for a bad tag
            worker_config = dataclasses.replace(worker_config, tags=checked_tags(tags, "Cluster(tags=...)"))
        if store is not None and not isinstance(store, StoreSettings):
            raise TypeError(f"store must be a StoreSettings or None (no store), got {type(store).__name__}")
        self._template = worker_config
        self._store_settings = store
        self._store: StoreProcess | None = None
        self._worker_names = list(worker_names)
        self._start_timeout_seconds = start_timeout_seconds
        self._processes: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._pipe: ReadinessPipe | None = None
        self._registered = 0
        self._failures: list[str] = []
        self._launched_at = 0.0
        self._next_warning = math.inf
        self._seen_exits: set[int] = set()
        self._stopping = False

    @property
    def address(self) -> str:
        return self._template.address

    @property
    def worker_names(self) -> list[str]:
        return list(self._worker_names)

    @property
    def worker_pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    @property
    def registered_workers(self) -> int:
        return self._registered

    @property
    def store_pid(self) -> int | None:
        return self._store.pid if self._store is not None else None

    @property
    def store_address(self) -> str:
        """The data address of this cluster's store; empty without one (or before `launch`)."""
        return self._store.address.data_address if self._store is not None else ""

    def __repr__(self) -> str:
        from scaler.cluster.display import cluster_text  # the display's imports (the monitor feed's codec) only here

        return cluster_text(*self._display_facts())

    def _repr_html_(self) -> str:
        """Jupyter's view: the workers started here and, from one look at the scheduler's monitor feed, the
        whole cluster's workers and tasks."""
        from scaler.cluster.display import cluster_html  # the display's imports only here, not at every cluster start

        facts = self._display_facts()
        return cluster_html(*facts, default_monitor_address(facts[0]))

    def _display_facts(self) -> tuple[str, int, int, int, str]:
        processes = list(getattr(self, "_processes", ()))
        running = sum(1 for process in processes if process.poll() is None)
        store = getattr(self, "_store", None)
        return (
            getattr(getattr(self, "_template", None), "address", "?"), len(getattr(self, "_worker_names", ())),
            getattr(self, "_registered", 0), running,
            store.address.data_address if store is not None else "",
        )

    # ------------------------------------------------------------------------------------------ start

    def start(self) -> None:
        """Start the workers and wait until every one has registered with the scheduler."""
        self.launch()
        try:
            self._wait_until_registered(self._start_timeout_seconds)
        except BaseException:
            self.shutdown()
            raise

    def launch(self) -> None:
        """Start the store and wait until it listens (ClusterStartError if it cannot), then start the workers
        without waiting for them (the command line watches them with `watch`)."""
        template = self._template
        if self._processes or self._store is not None:
            raise RuntimeError("this cluster is already started")
        atexit.register(self.shutdown)
        if self._store_settings is not None:
            self._store = self._start_store(self._store_settings)
            template = self._template = dataclasses.replace(template, store_address=self.store_address)
        logger.info(
            f"ClusterProcess: starting {len(self._worker_names)} workers, "
            f"heartbeat_interval_seconds={template.heartbeat_interval_seconds:g}, "
            f"task_queue_size={template.task_queue_size}"
        )
        pipe = self._pipe = ReadinessPipe()
        environment = pipe.child_environment(environment_exiting_with_this_process())
        self._launched_at = time.monotonic()
        self._next_warning = self._launched_at + _FIRST_WARNING_SECONDS
        try:
            with self._lock:
                for index, name in enumerate(self._worker_names):
                    config = dataclasses.replace(template, name=name)
                    process = subprocess.Popen(
                        [sys.executable, "-m", "scaler.worker.agent", json.dumps(dataclasses.asdict(config))],
                        env=environment,
                        stdin=subprocess.DEVNULL,
                        pass_fds=pipe.pass_fds,
                    )
                    self._processes.append(process)
                    logger.info(f"Worker[{index}] started")
        finally:
            pipe.children_started()

    def _start_store(self, settings: StoreSettings) -> StoreProcess:
        template = self._template
        try:
            store = StoreProcess.start(
                capacity_bytes=settings.capacity_bytes,
                data_address=settings.data_address or default_data_address(template.address),
                spill_directory=settings.spill_directory, scheduler_address=template.address,
                name=f"{socket.gethostname().split('.')[0]}|store", logging_level=template.logging_level.upper(),
                logging_paths=template.logging_paths, heartbeat_interval_seconds=template.heartbeat_interval_seconds,
                death_timeout_seconds=template.death_timeout_seconds, curve_server_key=template.curve_server_key,
                curve_secret_key=template.curve_secret_key, timeout_seconds=self._start_timeout_seconds,
                borrowing=settings.borrowing,
            )
        except StoreStartError as error:
            raise ClusterStartError(f"Cluster: the store could not start: {error}") from None
        logger.info(f"Cluster: store listening at {store.address.data_address} (pid {store.pid})")
        return store

    @property
    def reports_pending(self) -> bool:
        """Whether a worker may still report over the readiness pipe (once all have closed it, `watch` only sleeps
        out its timeout there)."""
        return self._pipe is not None and not self._pipe.closed_by_all

    def watch(self, timeout: float = _WATCH_SECONDS) -> None:
        """Take the workers' reports (waiting up to `timeout`), and say what a user should know: that they
        all registered, that some still wait for a scheduler, that one exited."""
        pipe = self._pipe
        if pipe is None:
            return
        everyone = len(self._worker_names)
        for report in pipe.read(timeout):
            if report.state == REGISTERED:
                self._registered += 1
                if self._registered == everyone:
                    logger.info(f"Cluster: all {everyone} workers registered with the scheduler at {self.address}")
            elif report.state == FAILED:
                self._failures.append(report.detail)
        now = time.monotonic()
        if self._registered < everyone and now >= self._next_warning:
            self._next_warning = now + _WARNING_INTERVAL_SECONDS
            logger.warning(
                f"Cluster: {self._registered} of {everyone} workers registered with the scheduler at {self.address} "
                f"after {now - self._launched_at:.0f}s; is a scheduler running there, and reachable? Workers give "
                f"up after --death-timeout-seconds ({self._template.death_timeout_seconds:g}s)"
            )
        if not self._stopping:
            if self._store is not None and self._store.process.poll() is not None and -1 not in self._seen_exits:
                self._seen_exits.add(-1)
                logger.warning(
                    f"Cluster: the store (pid {self._store.pid}) exited with code {self._store.process.returncode}; "
                    "the workers go on without it"
                )
            for index, process in enumerate(self._processes):
                code = process.poll()
                if code is not None and index not in self._seen_exits:
                    self._seen_exits.add(index)
                    log = logger.info if code == 0 else logger.warning
                    log(f"Cluster: Worker[{index}] (pid {process.pid}) exited with code {code}")

    def _wait_until_registered(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        everyone = len(self._worker_names)
        while self._registered < everyone:
            self.watch(min(_WATCH_SECONDS, max(0.0, deadline - time.monotonic())))
            if self._registered == everyone:
                return
            problem = self.startup_problem()
            if problem is not None:
                raise ClusterStartError(f"Cluster: a worker could not join the scheduler at {self.address}: {problem}")
            if time.monotonic() >= deadline:
                raise ClusterStartError(
                    f"Cluster: {self._registered} of {everyone} workers registered with the scheduler at "
                    f"{self.address} within {timeout:g}s; is a scheduler running there, and reachable?"
                )

    def startup_problem(self) -> str | None:
        """Why a worker will never register (what it reported, or that it exited), or None."""
        if not self._failures and self._registered < len(self._worker_names):
            exited = [(index, p.returncode) for index, p in enumerate(self._processes) if p.poll() is not None]
            if exited:
                self.watch(0.5)  # its last words may still be in the pipe
                if not self._failures:
                    index, code = exited[0]
                    self._failures.append(f"Worker[{index}] exited with code {code} before it registered")
        return self._failures[0] if self._failures else None

    # ------------------------------------------------------------------------------------------ state

    def all_exited(self) -> bool:
        return all(process.poll() is not None for process in self._processes)

    def is_alive(self) -> bool:
        """Whether any worker still runs (1.9.x: the cluster process was alive)."""
        return any(process.poll() is None for process in self._processes)

    @property
    def exitcode(self) -> int | None:
        """None while a worker runs; then 0 if every worker exited cleanly, else the first other code."""
        codes = [process.poll() for process in self._processes]
        if not codes or None in codes:
            return None
        return next((code for code in codes if code != 0), 0)

    @property
    def failed_workers(self) -> int:
        return sum(1 for process in self._processes if process.poll() not in (None, 0))

    # ------------------------------------------------------------------------------------------ stop

    def terminate(self) -> None:
        """Ask every worker to stop (SIGTERM) without waiting; `join()` waits."""
        self._stopping = True
        for process in list(self._processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self._stopping = True
        for process in list(self._processes):
            if process.poll() is None:
                process.kill()
        if self._store is not None:
            self._store.kill()

    def join(self, timeout: float | None = None) -> None:
        """Wait until every worker has exited (or `timeout` seconds have passed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for process in list(self._processes):
            try:
                process.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return
        if self._stopping:
            self._stop_store()

    def close(self) -> None:
        """Release what the cluster holds once its workers have exited (1.9.x: Process.close)."""
        if self.is_alive():
            raise ValueError("cannot close a cluster whose workers still run; call terminate() and join() first")
        if self._pipe is not None:
            self._pipe.close()
        atexit.unregister(self.shutdown)

    def shutdown(self) -> None:
        """Stop every worker and reap it: SIGTERM, then SIGKILL after a grace period. Safe to call twice."""
        self._stopping = True
        atexit.unregister(self.shutdown)
        with self._lock:
            processes = list(self._processes)
        stop_processes(processes, _STOP_GRACE_SECONDS)
        self._stop_store()
        if self._pipe is not None:
            self._pipe.close()

    def _stop_store(self) -> None:
        """After the workers: they may still be handing it their last results."""
        if self._store is not None:
            self._store.stop(_STOP_GRACE_SECONDS)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()


def _config_from_legacy_keywords(address: Any, settings: dict[str, Any]) -> WorkerConfig:
    ignored = {name: settings.pop(name) for name in _IGNORED_LEGACY_KEYWORDS if name in settings}
    check_ignored_settings({name: value for name, value in ignored.items() if value is not None},
                           tuple(_IGNORED_LEGACY_KEYWORDS.values()))
    unknown = sorted(set(settings) - set(_LEGACY_KEYWORDS))
    if unknown:
        raise TypeError(f"Cluster() got unexpected keyword arguments {unknown}")
    if address is None:
        raise TypeError("Cluster() needs a WorkerConfig, or the scheduler's address as address=...")
    # A 1.9.x ZMQConfig (or ours) says where with to_address(); a string is the address itself.
    text = address.to_address() if hasattr(address, "to_address") else address
    fields: dict[str, Any] = {"address": join_scheduler_addresses(parse_scheduler_addresses(text))}
    for keyword, value in settings.items():
        if value is not None:
            fields[_LEGACY_KEYWORDS[keyword]] = value
    if isinstance(fields.get("logging_paths"), str):
        fields["logging_paths"] = (fields["logging_paths"],)
    if "logging_paths" in fields:
        fields["logging_paths"] = tuple(fields["logging_paths"])
    return WorkerConfig(**fields)


def default_worker_names(count: int, prefix: str | None = None) -> list[str]:
    import socket

    host = prefix or socket.gethostname().split(".")[0]
    return [f"{host}|{index}" for index in range(count)]
