"""Which processors broke the worker's limits (--task-timeout-seconds, --memory-limit-bytes): the agent core
stops them, before the OS does, and their running task fails with the error named here."""

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
        if config.task_timeout_seconds > 0 and now - processor.watched_since > config.task_timeout_seconds:
            over.append(OverLimit(
                processor, "scaler.errors.TaskTimeoutError",
                f"the task ran longer than {config.task_timeout_seconds:g}s (--task-timeout-seconds) and was stopped",
                TaskTimeoutError,
            ))
            continue
        rss = processor_rss.get(processor.identity, 0)
        if config.memory_limit_bytes > 0 and rss > config.memory_limit_bytes:
            over.append(OverLimit(
                processor, "scaler.errors.MemoryLimitError",
                f"its processor used {rss:,} bytes, over the worker's limit of {config.memory_limit_bytes:,} "
                "(--memory-limit-bytes), and was stopped", MemoryLimitError,
            ))
    return over
