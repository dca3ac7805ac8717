"""LocalCluster: a Scaler scheduler and its workers on this machine, with dask's LocalCluster keywords.

A Scaler worker process runs one task at a time, so dask's `n_workers` workers of `threads_per_worker` threads
each become `n_workers * threads_per_worker` Scaler worker processes (by default one per core).
`processes=False` is accepted, but Scaler always runs tasks in processes. `memory_limit` (bytes, a string
such as "4GB", a fraction of this machine's memory, or "auto"/0/None for no limit) is per dask worker, shared
by its threads: each Scaler process gets its share, and a process going over it is stopped and its task
fails with MemoryLimitError. Other dask keywords (dashboard_address, silence_logs, ...) are accepted and
have no effect. `dashboard_link` is "": Scaler's monitor (`scaler_ui`) is started apart.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from scaler.cluster.combo import SchedulerClusterCombo


class LocalCluster:
    def __init__(
        self, n_workers: int | None = None, threads_per_worker: int | None = None, processes: bool = True,
        loop: Any = None, start: Any = None, host: str | None = None, ip: str | None = None, scheduler_port: int = 0,
        silence_logs: Any = None, dashboard_address: Any = None, asynchronous: bool = False,
        memory_limit: Any = "auto", name: str | None = None, **ignored: Any,
    ) -> None:
        cores = os.cpu_count() or 1
        threads = threads_per_worker if threads_per_worker is not None else (1 if n_workers else cores)
        workers = n_workers if n_workers is not None else max(1, cores // threads)
        if workers < 1 or threads < 1:
            raise ValueError(f"LocalCluster needs at least 1 worker of 1 thread, got {workers} of {threads}")
        self.asynchronous = asynchronous
        self.name = name or "LocalCluster"
        self.processes = workers * threads
        self._memory_limit_bytes = _bytes_per_process(memory_limit, threads)
        host = host or ip
        self._address = f"tcp://{host or '127.0.0.1'}:{scheduler_port}" if (host or scheduler_port) else None
        self._combo: SchedulerClusterCombo | None = None
        self.status = "created"
        if not asynchronous:
            self._start()

    def _start(self) -> None:
        if self._combo is None:
            self._combo = SchedulerClusterCombo(
                address=self._address, n_workers=self.processes, memory_limit_bytes=self._memory_limit_bytes,
                logging_level="WARNING",
            )
            self.status = "running"

    @property
    def scheduler_address(self) -> str:
        if self._combo is None:
            raise RuntimeError("this asynchronous LocalCluster has not started: `await` it or use `async with`")
        return self._combo.get_address()

    @property
    def dashboard_link(self) -> str:
        return ""

    def close(self, timeout: Any = None) -> Any:
        """Stop the workers and the scheduler; awaitable with asynchronous=True."""
        if self.asynchronous:
            try:
                return asyncio.get_running_loop().run_in_executor(None, self._close)
            except RuntimeError:
                pass
        self._close()
        return None

    def _close(self) -> None:
        combo, self._combo = self._combo, None
        if combo is not None:
            combo.shutdown()
        self.status = "closed"

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._close()

    def __await__(self) -> Any:
        async def started() -> LocalCluster:
            await asyncio.get_running_loop().run_in_executor(None, self._start)
            return self

        return started().__await__()

    async def __aenter__(self) -> LocalCluster:
        return await self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._close)

    def __repr__(self) -> str:
        address = self._combo.get_address() if self._combo is not None else None
        return f"LocalCluster({address!r}, processes={self.processes}, status={self.status})"


def _bytes_per_process(memory_limit: Any, threads: int) -> int:
    """dask's per-worker memory_limit as the byte limit of each of its Scaler processes (0: none)."""
    if memory_limit in (None, 0, "auto", "0"):
        return 0
    if isinstance(memory_limit, str):
        from dask.utils import parse_bytes

        total = parse_bytes(memory_limit)
    elif isinstance(memory_limit, float) and 0 < memory_limit <= 1:
        import psutil

        total = int(memory_limit * psutil.virtual_memory().total)
    elif isinstance(memory_limit, (int, float)) and not isinstance(memory_limit, bool) and memory_limit > 0:
        total = int(memory_limit)
    else:
        raise ValueError(
            f"memory_limit must be bytes, a string such as '4GB', a fraction or 'auto', got {memory_limit!r}"
        )
    return max(1, total // threads)
