"""Which watched processes have exited: by pidfd, or by start time where there are no pidfds."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from scaler.store.process_watch import ProcessWatch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes")


def gone_within(watch: ProcessWatch, seconds: float = 30.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        gone = watch.gone()
        if gone:
            return gone
        time.sleep(0.02)
    return []


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfd", "start-time"])
def test_an_exited_process_is_reported_once_and_a_live_one_never(pidfds: bool, monkeypatch) -> None:
    if not pidfds:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    watch = ProcessWatch()
    short = subprocess.Popen([sys.executable, "-c", "pass"])
    watch.watch(short.pid)
    watch.watch(os.getpid())
    assert gone_within(watch) == [short.pid]  # exited, not reaped yet
    short.wait()
    assert watch.gone() == []  # once
    watch.close()


def test_a_process_gone_before_it_is_watched_is_reported() -> None:
    short = subprocess.Popen([sys.executable, "-c", "pass"])
    short.wait()
    watch = ProcessWatch()
    watch.watch(short.pid)
    assert watch.gone() == [short.pid]
