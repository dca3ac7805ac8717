"""What `future.profiling_info()` returns for a task submitted with `profiling=True`."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ProfilingInfo:
    duration_us: int   # wall time of the function call, in microseconds
    peak_memory: int   # highest growth of the processor's RSS while the call ran, in bytes (sampled)
    cpu_time_s: float  # CPU time the processor spent in the call, in seconds

    # The names used by released Scaler 1.9.x, so code written against either keeps running.
    @property
    def duration_s(self) -> float:
        return self.duration_us / 1e6

    @property
    def memory_peak(self) -> int:
        return self.peak_memory
