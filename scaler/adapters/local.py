"""LocalProcessAdapter: worker groups as local processes, each group a `Cluster` (what `scaler_cluster` runs)."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import socket
import time
from typing import Iterable, Sequence

from scaler.adapters.worker_adapter import GroupState, WorkerAdapter, WorkerGroup
from scaler.cluster.cluster import Cluster
from scaler.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

# As long as `Cluster.shutdown` gives its workers before it kills them.
_STOP_GRACE_SECONDS = 5.0


@dataclasses.dataclass
class _LocalGroup:
    group_id: str
    cluster: Cluster
    stop_deadline: float | None = None  # set by stop_groups; past it, what still runs is killed


class LocalProcessAdapter(WorkerAdapter):
    """Each group is a `Cluster` of `workers_per_group` worker processes on this machine, made from
    `worker_config` (its address is the scheduler's), exactly as `scaler_cluster -n N` runs them.

    Groups are named `<host>-<pid>-<n>` and their workers `<group>|<index>`.
    """

    def __init__(self, worker_config: WorkerConfig, workers_per_group: int = 1) -> None:
        if not isinstance(worker_config, WorkerConfig):
            raise TypeError(f"worker_config must be a WorkerConfig, got {type(worker_config).__name__}")
        if not worker_config.address:
            raise ValueError("worker_config needs the scheduler's address, e.g. WorkerConfig('tcp://127.0.0.1:2345')")
        if isinstance(workers_per_group, bool) or not isinstance(workers_per_group, int) or workers_per_group < 1:
            raise ValueError(f"workers_per_group must be a whole number of at least 1, got {workers_per_group!r}")
        self._template = worker_config
        self._per_group = workers_per_group
        self._prefix = f"{socket.gethostname().split('.')[0]}-{os.getpid()}"
        self._numbers = itertools.count()
        self._groups: dict[str, _LocalGroup] = {}

    @property
    def workers_per_group(self) -> int:
        return self._per_group

    def start_groups(self, count: int) -> list[WorkerGroup]:
        started = []
        for _ in range(count):
            group_id = f"{self._prefix}-{next(self._numbers)}"
            names = [f"{group_id}|{index}" for index in range(self._per_group)]
            cluster = Cluster(self._template, names)
            cluster.launch()
            self._groups[group_id] = _LocalGroup(group_id, cluster)
            started.append(WorkerGroup(group_id, tuple(names), GroupState.RUNNING))
        return started

    def stop_groups(self, group_ids: Iterable[str]) -> None:
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None or group.stop_deadline is not None:
                continue
            group.cluster.terminate()
            group.stop_deadline = time.monotonic() + _STOP_GRACE_SECONDS

    def poll(self) -> Sequence[WorkerGroup]:
        report = []
        now = time.monotonic()
        for group in list(self._groups.values()):
            cluster = group.cluster
            cluster.watch(0.0)
            if group.stop_deadline is not None and now > group.stop_deadline and not cluster.all_exited():
                cluster.kill()
            names = tuple(cluster.worker_names)
            if cluster.all_exited():
                cluster.join()
                cluster.close()
                del self._groups[group.group_id]
                report.append(WorkerGroup(group.group_id, names, GroupState.ENDED, f"exit code {cluster.exitcode}"))
            else:
                report.append(WorkerGroup(group.group_id, names, GroupState.RUNNING))
        return report

    def close(self) -> None:
        groups = list(self._groups.values())
        self._groups.clear()
        for group in groups:
            group.cluster.terminate()
        for group in groups:
            group.cluster.shutdown()
