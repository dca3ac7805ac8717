"""Stopping child processes: SIGTERM, a grace period to finish cleanly, then SIGKILL; always reaped."""

from __future__ import annotations

import subprocess
import time
from typing import Sequence


def stop_processes(processes: Sequence[subprocess.Popen], grace_seconds: float) -> list[subprocess.Popen]:
    """Terminate every process at once, give them `grace_seconds` together, kill the late ones, reap all.

    Returns the processes that had to be killed, for the caller to name in its log.
    """
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace_seconds
    killed = []
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            killed.append(process)
    return killed


def stop_process(process: subprocess.Popen, grace_seconds: float) -> None:
    """Stop `process` and every process it started (a pool's workers, say): once orphaned, those could no
    longer be found, and would outlive it (loky's for the five minutes of its idle timeout)."""
    stop_process_trees([process], grace_seconds)


def stop_process_trees(processes: Sequence[subprocess.Popen], grace_seconds: float) -> None:
    """`stop_process` for several processes at once: one grace for them all, not one after another."""
    # psutil only here: a cluster's process, which stops its children with stop_processes, has no other use for it.
    import psutil

    descendants: list[psutil.Process] = []
    for process in processes:
        try:
            # Only while it is unreaped is its pid surely still its own.
            if process.poll() is None:
                descendants += psutil.Process(process.pid).children(recursive=True)
        except psutil.Error:
            pass
    stop_processes(processes, grace_seconds)
    for descendant in descendants:
        try:
            descendant.terminate()  # psutil checks it is still the same process, not a reused pid
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(descendants, timeout=grace_seconds)
    for descendant in alive:
        try:
            descendant.kill()
        except psutil.Error:
            pass
