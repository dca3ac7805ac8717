"""A processor keeps the memory of its large allocations for the next task while it is busy, and gives it
back once idle (scaler/utility/malloc_tuning.py): a real cluster, a task that fills 200 MB."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from scaler import Client
from tests.integration import waiting

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc tunables")

MB = 1 << 20


def fill_and_drop(size: int) -> tuple[int, int, str]:
    filled = b"x" * size  # every page touched, then freed when the task returns
    return os.getpid(), len(filled), os.environ.get("GLIBC_TUNABLES", "")


def test_a_processor_gives_back_the_memory_of_a_large_task_once_idle(client: Client) -> None:
    pid, size, tunables = client.submit(fill_and_drop, 8 * MB).result(timeout=60)
    assert "glibc.malloc.mmap_threshold" in tunables and "glibc.malloc.trim_threshold" in tunables
    processor = psutil.Process(pid)
    waiting.wait_until(lambda: processor.memory_info().rss < 150 * MB, "the processor settled", timeout=60)
    baseline = processor.memory_info().rss

    ran_there = []
    for _ in range(20):  # on the same processor: 200 MB that malloc keeps in its heap while the processor works
        pid_again, size, _ = client.submit(fill_and_drop, 200 * MB).result(timeout=60)
        assert size == 200 * MB
        ran_there.append(pid_again == pid)
        if ran_there[-1]:
            break
    assert any(ran_there), "the task never ran on the first processor"
    waiting.wait_until(
        lambda: processor.memory_info().rss < baseline + 50 * MB, "the idle processor gave the 200 MB back", timeout=60
    )


def pid_and_rss(argument: bytes) -> tuple[int, int]:
    return os.getpid(), psutil.Process().memory_info().rss


def test_a_processor_does_not_keep_the_large_arguments_of_the_tasks_it_has_run(client: Client) -> None:
    # Eight 40 MB arguments queued at once. Kept until their deletes arrive, each processor's memory would grow
    # by 40 MB a task; let go after each task, the next one's copy reuses the same memory.
    futures = [client.submit(pid_and_rss, bytes([index]) * (40 * MB)) for index in range(8)]
    by_processor: dict[int, list[int]] = {}
    for future in futures:
        pid, rss = future.result(timeout=60)
        by_processor.setdefault(pid, []).append(rss)
    for pid, sizes in by_processor.items():
        assert max(sizes) - sizes[0] < 60 * MB, f"processor {pid}: RSS {[size // MB for size in sizes]} MB"
