"""AdaptiveScaler: the I/O shell that grows and shrinks an adapter's workers with the scheduler's load.

It reads the scheduler's monitor feed (about a snapshot a second), polls the adapter, hands both to the
ScalingPolicy and carries out what the policy decides. All decisions are the policy's. Given the
scheduler's address, it drains a worker (Client.drain_workers) before stopping it, and stops it once the
feed shows it draining and holding no task.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Callable, Sequence

from scaler.adapters.scaling_policy import (
    STALE_LOAD_SECONDS,
    ClusterLoad,
    DrainWorkers,
    GroupEnded,
    ScalingAction,
    ScalingPolicy,
    ScalingSettings,
    StartGroups,
    StopGroups,
)
from scaler.adapters.worker_adapter import WorkerAdapter
from scaler.client.client import Client
from scaler.protocol.monitor_feed import MonitorSubscriber
from scaler.protocol.monitor_messages import MonitorSnapshot

logger = logging.getLogger(__name__)

DEFAULT_POLL_SECONDS = 5.0
_STOP_JOIN_SECONDS = 30.0
# The drain request's client waits this long for the scheduler at most: the scaling loop must not stall.
_DRAIN_TIMEOUT_SECONDS = 10.0


def load_from_snapshot(snapshot: MonitorSnapshot) -> ClusterLoad:
    tasks_by_worker: dict[str, int] = {}
    draining = set()
    for worker in snapshot.workers:
        # Names need not be unique (a requeued batch job reuses its names): count them together.
        tasks_by_worker[worker.name] = tasks_by_worker.get(worker.name, 0) + worker.assigned
        if worker.draining:
            draining.add(worker.name)
    return ClusterLoad(snapshot.tasks.unassigned, tasks_by_worker, frozenset(draining))


class AdaptiveScaler:
    """Keeps between `minimum_workers` and `maximum_workers` workers of `adapter` running, as the load wants.

    `monitor_address` is the scheduler's monitor address (printed by the scheduler at start;
    `ipc:///tmp/HOST_PORT_monitor` by default, which only a process on the scheduler's machine can read;
    give the scheduler `--monitor-address tcp://...` to scale from elsewhere). `poll_seconds` is how often
    the adapter is asked what it runs (each time a `squeue` for Slurm).

    `scheduler_address` (the address workers and clients use) lets it drain a worker before stopping it:
    the scheduler sends it nothing more and moves its queued tasks to other workers, and the worker is
    stopped once it holds no task, so scaling down never kills a task mid-run. It connects there as a
    client (CURVE keys, if any, from the SCALER_* environment variables, as any client). Without it,
    idle workers are stopped without draining, which leaves a short window in which the scheduler may
    have just sent one a task (the task is then run again elsewhere). `drain_workers` replaces the
    built-in drain with a callable taking the worker names (tests use it to act at that moment).

    Use `run()` to scale in the calling thread until `stop()` (the command lines do), or the object as a
    context manager (`start()` in a thread, then `close()`). `close()` stops scaling and then closes
    the adapter, which ends every group it started.
    """

    def __init__(
        self,
        adapter: WorkerAdapter,
        monitor_address: str,
        *,
        minimum_workers: int = ScalingSettings.minimum_workers,
        maximum_workers: int = ScalingSettings.maximum_workers,
        idle_seconds: float = ScalingSettings.idle_seconds,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        scheduler_address: str | None = None,
        drain_workers: Callable[[Sequence[str]], object] | None = None,
    ) -> None:
        settings = ScalingSettings(minimum_workers, maximum_workers, idle_seconds)
        if isinstance(poll_seconds, bool) or not isinstance(poll_seconds, (int, float)):
            raise TypeError(f"poll_seconds must be a number, got {poll_seconds!r}")
        if not (math.isfinite(poll_seconds) and poll_seconds > 0):
            raise ValueError(f"poll_seconds must be a number above 0, got {poll_seconds!r}")
        self._adapter = adapter
        self._monitor_address = monitor_address
        self._poll_seconds = float(poll_seconds)
        if scheduler_address is not None and not isinstance(scheduler_address, str):
            raise TypeError(f"scheduler_address must be an address (str), got {scheduler_address!r}")
        if drain_workers is not None and not callable(drain_workers):
            raise TypeError(f"drain_workers must be callable, got {drain_workers!r}")
        self._scheduler_address = scheduler_address
        self._drain_client: Client | None = None
        self._drain_workers = drain_workers
        drain_first = drain_workers is not None or scheduler_address is not None
        self._policy = ScalingPolicy(settings, adapter.workers_per_group, drain_first=drain_first)
        self._settings = settings
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def adapter(self) -> WorkerAdapter:
        return self._adapter

    @property
    def settings(self) -> ScalingSettings:
        return self._settings

    # ------------------------------------------------------------------------------------------ lifetime

    def start(self) -> AdaptiveScaler:
        """Scale in a background thread until `close()`."""
        if self._thread is not None:
            raise RuntimeError("this AdaptiveScaler is already started")
        self._thread = threading.Thread(target=self.run, name="AdaptiveScaler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Make `run()` return soon (from any thread or a signal handler)."""
        self._stop.set()

    def close(self) -> None:
        """Stop scaling and close the adapter (ending every group it started). Safe to call twice."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(_STOP_JOIN_SECONDS)
        if not self._closed:
            self._closed = True
            self._adapter.close()

    def __enter__(self) -> AdaptiveScaler:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ loop

    def run(self) -> None:
        """Scale until `stop()`; the adapter stays open (call `close()`)."""
        settings = self._settings
        logger.info(
            f"AdaptiveScaler: scaling between {settings.minimum_workers} and {settings.maximum_workers} workers "
            f"({self._adapter.workers_per_group} per group), releasing workers idle for {settings.idle_seconds:g}s; "
            f"reading the load from {self._monitor_address}; "
            + ("draining workers before stopping them" if self._policy.drain_first else
               "stopping idle workers without draining them (no scheduler address given)")
        )
        try:
            self._scale(time.monotonic())
        finally:
            client, self._drain_client = self._drain_client, None
            if client is not None:
                client.disconnect()

    def _scale(self, started_at: float) -> None:
        warned_silent = False
        next_poll = started_at
        with MonitorSubscriber(self._monitor_address) as subscriber:
            while not self._stop.is_set():
                snapshot = subscriber.receive(min(1.0, max(0.0, next_poll - time.monotonic())))
                now = time.monotonic()
                if snapshot is not None:
                    self._policy.on_load(load_from_snapshot(snapshot), now)
                    if warned_silent:
                        logger.info(f"AdaptiveScaler: the monitor feed at {self._monitor_address} is back")
                        warned_silent = False
                else:
                    last = subscriber.last_received_at if subscriber.last_received_at is not None else started_at
                    if not warned_silent and now - last > STALE_LOAD_SECONDS:
                        warned_silent = True
                        logger.warning(
                            f"AdaptiveScaler: no snapshot from {self._monitor_address} for {now - last:.0f}s; "
                            "not scaling until one comes (is the scheduler running, and is this its monitor "
                            "address?)"
                        )
                if now >= next_poll:
                    next_poll = now + self._poll_seconds
                    self._poll(now)
                self._carry_out(self._policy.decide(now), now)

    def _poll(self, now: float) -> None:
        try:
            groups = self._adapter.poll()
        except Exception:
            logger.exception("AdaptiveScaler: the adapter could not say what it runs; trying again later")
            return
        for ended in self._policy.on_groups(groups, now):
            self._report_ended(ended, now)

    def _report_ended(self, ended: GroupEnded, now: float) -> None:
        group = ended.group
        detail = f" ({group.detail})" if group.detail else ""
        if ended.expected:
            logger.info(f"AdaptiveScaler: group {group.group_id} ended{detail}")
        elif not ended.joined:
            delay = max(0.0, self._policy.start_delay_until - now)
            logger.warning(
                f"AdaptiveScaler: group {group.group_id} ended{detail} before any of its workers joined the "
                f"scheduler; can its machines reach the scheduler, and do they have this Python and scaler? "
                f"(its output may say). Next start in {delay:.0f}s at the earliest"
            )
        else:
            logger.warning(
                f"AdaptiveScaler: group {group.group_id} was ended by the resource manager{detail}; the scheduler "
                f"reschedules the tasks of its workers ({', '.join(group.worker_names)})"
            )

    def _carry_out(self, actions: list[ScalingAction], now: float) -> None:
        for action in actions:
            if isinstance(action, StartGroups):
                try:
                    groups = self._adapter.start_groups(action.count)
                except Exception as error:
                    logger.error(f"AdaptiveScaler: could not start {action.count} group(s): {error}")
                    self._policy.on_start_failed(now)
                    continue
                self._policy.on_started(groups, now)
                logger.info(
                    f"AdaptiveScaler: started {len(groups)} group(s) ({action.reason}): "
                    f"{', '.join(group.group_id for group in groups)}"
                )
            elif isinstance(action, StopGroups):
                logger.info(f"AdaptiveScaler: stopping group(s) {', '.join(action.group_ids)} ({action.reason})")
                try:
                    self._adapter.stop_groups(action.group_ids)
                except Exception as error:
                    logger.error(f"AdaptiveScaler: could not stop group(s) {', '.join(action.group_ids)}: {error}")
            elif isinstance(action, DrainWorkers):
                logger.info(f"AdaptiveScaler: draining worker(s) {', '.join(action.worker_names)} ({action.reason})")
                try:
                    self._drain(action.worker_names)
                except Exception as error:
                    # Not stopped, and not left waiting for a drain that never came: live again, to retry later.
                    logger.error(f"AdaptiveScaler: could not drain {', '.join(action.worker_names)}: {error}")
                    self._policy.on_drain_failed(action.worker_names)

    def _drain(self, worker_names: Sequence[str]) -> None:
        if self._drain_workers is not None:
            self._drain_workers(worker_names)
            return
        assert self._scheduler_address is not None  # the policy drains only when one of the two is given
        if self._drain_client is None or not self._drain_client.is_connected:
            self._drain_client = Client(
                self._scheduler_address, name="AdaptiveScaler", timeout_seconds=_DRAIN_TIMEOUT_SECONDS
            )
        self._drain_client.drain_workers(list(worker_names))
