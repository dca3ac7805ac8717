"""Measures one task for `profiling=True`: wall time, CPU time, and peak memory growth.

Memory is sampled by a helper thread only while a profiled task runs, so tasks submitted without
profiling pay nothing, not even psutil's import: it happens at the first profiled task, not at every
processor's start.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from scaler.protocol import messages as m

_SAMPLE_SECONDS = 0.01

if TYPE_CHECKING:
    import psutil


class TaskProfiler:
    def __init__(self) -> None:
        self._process: psutil.Process | None = None
        self._measuring = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._baseline = 0
        self._peak = 0
        self._thread: threading.Thread | None = None
        self._started_ns = 0
        self._cpu_started_ns = 0

    def start(self) -> None:
        if self._process is None:
            import psutil

            self._process = psutil.Process()
        if self._thread is None:
            self._thread = threading.Thread(target=self._sample, name="scaler-profiler", daemon=True)
            self._thread.start()
        rss = self._process.memory_info().rss
        with self._lock:
            self._baseline = self._peak = rss
        self._measuring.set()
        self._cpu_started_ns = time.process_time_ns()
        self._started_ns = time.perf_counter_ns()

    def finish(self, task_id: int) -> m.TaskProfile:
        duration_ns = time.perf_counter_ns() - self._started_ns
        cpu_ns = time.process_time_ns() - self._cpu_started_ns
        self._measuring.clear()
        assert self._process is not None, "finish() without start()"
        self._observe(self._process.memory_info().rss)
        with self._lock:
            growth = max(0, self._peak - self._baseline)
        return m.TaskProfile(
            task_id=task_id, duration_us=duration_ns // 1000, cpu_time_us=cpu_ns // 1000, peak_memory_bytes=growth
        )

    def close(self) -> None:
        self._stop.set()
        self._measuring.set()
        if self._thread is not None:
            self._thread.join(timeout=1)

    def _observe(self, rss: int) -> None:
        with self._lock:
            if rss > self._peak:
                self._peak = rss

    def _sample(self) -> None:
        assert self._process is not None, "the sampler starts after the process handle"
        while not self._stop.is_set():
            self._measuring.wait()
            while self._measuring.is_set() and not self._stop.is_set():
                self._observe(self._process.memory_info().rss)
                time.sleep(_SAMPLE_SECONDS)
