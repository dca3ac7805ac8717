"""The worker-adapter interface: how Scaler starts and stops workers on somebody else's machines.

An adapter is the only part that knows a resource manager (local processes, Slurm, Kubernetes, PBS,
...). A scaling policy decides how many workers there should be; the adapter carries that out and
reports what it runs. Everything else (connecting to the scheduler, registering, running tasks,
recovering the tasks of a worker that died) is what `scaler_cluster` already does on the machine the
adapter gets for it.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from typing import Iterable, Sequence


class GroupState(enum.Enum):
    PENDING = "pending"  # asked for; the resource manager has not started it (yet)
    RUNNING = "running"  # its processes run; its workers may still be connecting to the scheduler
    ENDED = "ended"  # gone for good: stopped by us, or ended by the resource manager (preempted, time limit, ...)


@dataclasses.dataclass(frozen=True)
class WorkerGroup:
    """Workers started and stopped together: one local process group, one Slurm job, one pod, ..."""

    group_id: str  # the adapter's handle: a Slurm job id, a pod name, ...
    # The names its workers register with (`scaler_cluster --worker-names`, the `name` of their hello): the
    # monitor feed lists workers by these names, which is how a policy knows what each group is doing.
    worker_names: tuple[str, ...]
    state: GroupState
    # Why it ended or why it waits, in the resource manager's words ("PREEMPTED", "TIMEOUT", "exit code 1").
    detail: str = ""


class WorkerAdapter(abc.ABC):
    """Starts and stops groups of Scaler workers on a resource manager, and says what it runs.

    To write one (Kubernetes, PBS, LSF, a cloud's VMs), implement the four methods below. Rules:

    - A group is the unit the resource manager starts and stops: a batch job, a pod, a VM. Each group runs
      `workers_per_group` workers by running, wherever the resource manager puts it,

          scaler_cluster -n <workers_per_group> --worker-names <name>,<name>,... <scheduler address>

      (plus any CURVE keys and worker options), with names unique among all the groups this adapter
      ever starts. `scaler_cluster` exits when its workers do, and on SIGTERM its workers leave the
      scheduler cleanly, which hands their queued tasks back at once.
    - `start_groups` asks for new groups and returns at once (it must not wait for them to run). It
      returns them as the resource manager knows them, normally PENDING, with their `worker_names`.
    - `stop_groups` asks the resource manager to end those groups (SIGTERM first, as `scancel` and
      `kubectl delete pod` do); it too returns at once. The policy only stops groups whose workers hold
      no task, but a worker killed with tasks loses none: the scheduler requeues them (README, Failures).
    - `poll` returns every group started and not yet reported ENDED, each in its current state. A group
      that ended (by `stop_groups` or by the resource manager: preemption, time limit, node failure, a
      crash) is returned once as ENDED, with the reason in `detail`, and then forgotten. It must not
      raise for a passing failure of the resource manager's tools; it logs and returns what it knows.
    - `close` ends every group still running and releases what the adapter holds; safe to call twice.
      Calls come from one thread.
    """

    @property
    @abc.abstractmethod
    def workers_per_group(self) -> int:
        """How many workers each group runs."""

    @abc.abstractmethod
    def start_groups(self, count: int) -> list[WorkerGroup]:
        """Ask for `count` new groups; returns them (normally PENDING) without waiting for them to run."""

    @abc.abstractmethod
    def stop_groups(self, group_ids: Iterable[str]) -> None:
        """Ask for these groups to end; unknown or already ended ids are ignored."""

    @abc.abstractmethod
    def poll(self) -> Sequence[WorkerGroup]:
        """Every group not yet reported ENDED, in its state now; an ended group is reported once as ENDED."""

    @abc.abstractmethod
    def close(self) -> None:
        """End every group and release resources; safe to call twice."""

    def __enter__(self) -> WorkerAdapter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
