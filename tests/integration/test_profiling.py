"""Task profiling: the example of document 003, the 1.9.x names, and a Client-wide switch."""

from __future__ import annotations

import time

import pytest

from scaler import Client, SchedulerClusterCombo


def calculate(sec: int):
    return sec * 1


def busy_then_allocate(seconds: float, megabytes: int) -> int:
    deadline = time.process_time() + seconds
    while time.process_time() < deadline:
        pass
    block = bytearray(megabytes * 1024 * 1024)
    time.sleep(0.05)  # long enough for the sampler to see it
    return len(block)


def test_profiling_info_as_documented(client: Client) -> None:
    fut = client.submit(calculate, 1, profiling=True)
    assert fut.result(timeout=30) == 1
    info = fut.profiling_info()
    assert isinstance(info.duration_us, int) and info.duration_us >= 0
    assert isinstance(info.peak_memory, int) and info.peak_memory >= 0
    assert info.duration_s == info.duration_us / 1e6  # 1.9.x names
    assert info.memory_peak == info.peak_memory


def test_profiling_measures_time_cpu_and_memory(client: Client) -> None:
    fut = client.submit(busy_then_allocate, 0.2, 64, profiling=True)
    assert fut.result(timeout=30) == 64 * 1024 * 1024
    info = fut.profiling_info()
    assert info.duration_us >= 200_000
    assert info.cpu_time_s >= 0.15
    assert info.peak_memory >= 32 * 1024 * 1024


def test_profiling_info_needs_profiling_and_a_finished_task(client: Client) -> None:
    fut = client.submit(calculate, 2)
    assert fut.result(timeout=30) == 2
    with pytest.raises(ValueError, match="profiling=True"):
        fut.profiling_info()


def test_client_wide_profiling(combo: SchedulerClusterCombo) -> None:
    with Client(address=combo.get_address(), profiling=True) as client:
        fut = client.submit(calculate, 3)
        assert fut.result(timeout=30) == 3
        assert fut.profiling_info().duration_us >= 0
