"""Client.drain_workers: the names it takes, checked where the user calls it, and the scheduler's answer."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from scaler.protocol import messages as m


@dataclasses.dataclass(frozen=True)
class DrainResult:
    """What the scheduler answered to a drain, each name once, in the order asked."""

    # Names of connected workers that now get no new task (drained now or before); their queued tasks
    # moved to other workers, and each is safe to stop once the monitor shows it holding no task.
    draining: tuple[str, ...]
    # Names no connected worker has (a typo, or a worker that has left already).
    unknown: tuple[str, ...]


def drain_request(worker_names: Iterable[str]) -> m.DrainWorkers:
    if isinstance(worker_names, (str, bytes)) or not isinstance(worker_names, Iterable):
        raise TypeError(
            f"worker_names must be a list of worker names (str), got {type(worker_names).__name__} "
            f"{worker_names!r}; to drain one worker, pass [name]"
        )
    names = list(worker_names)
    wrong = [name for name in names if not isinstance(name, str)]
    if wrong:
        raise TypeError(f"worker names are str, as the monitor shows them; got {wrong[0]!r}")
    return m.DrainWorkers(worker_names=names)


def drain_result(response: m.DrainWorkersResponse) -> DrainResult:
    return DrainResult(draining=tuple(response.draining), unknown=tuple(response.unknown))
