"""Which processors broke the worker's limits (--task-timeout-seconds, --memory-limit-bytes): the agent core
stops them, before the OS does, and their running task fails with the error named here. A task over both fails
with MemoryLimitError, whose message names the timeout too."""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

from scaler.errors import MemoryLimitError, TaskTimeoutError
from scaler.worker.config import WorkerConfig
from scaler.worker.processor_pool import ProcessorRecord


@dataclasses.dataclass(frozen=True)
class OverLimit:
    processor: ProcessorRecord
    type_name: str
    message: str
    error_type: type[Exception]


def over_limits(
    config: WorkerConfig, processors: Iterable[ProcessorRecord], now: float, processor_rss: Mapping[bytes, int]
) -> list[OverLimit]:
    if config.task_timeout_seconds <= 0 and config.memory_limit_bytes <= 0:
        return []
    over = []
    for processor in processors:
        if processor.watched_task_id not in processor.outstanding:
            continue
        timeout = config.task_timeout_seconds
        timed_out = timeout > 0 and now - processor.watched_since > timeout
        rss = processor_rss.get(processor.identity, 0)
        # Both broken: the memory limit is named, since raising the timeout alone would not let the task succeed.
        if config.memory_limit_bytes > 0 and rss > config.memory_limit_bytes:
            also = f"; it had also run longer than {timeout:g}s (--task-timeout-seconds)" if timed_out else ""
            over.append(OverLimit(
                processor, "scaler.errors.MemoryLimitError",
                f"its processor used {rss:,} bytes, over the worker's limit of {config.memory_limit_bytes:,} "
                f"(--memory-limit-bytes), and was stopped{also}", MemoryLimitError,
            ))
        elif timed_out:
            over.append(OverLimit(
                processor, "scaler.errors.TaskTimeoutError",
                f"the task ran longer than {timeout:g}s (--task-timeout-seconds) and was stopped", TaskTimeoutError,
            ))
    return over
