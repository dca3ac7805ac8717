"""Which local processes have exited: the store takes back what they borrowed or mapped.

A pidfd (Linux 5.3) becomes readable when its process exits and, unlike a pid, never names another
process later; without pidfds, the process's start time tells it from a new one with the same pid.
"""

from __future__ import annotations

import os
import select

import psutil


class ProcessWatch:
    def __init__(self) -> None:
        self._pidfds: dict[int, int] = {}
        self._start_times: dict[int, float] = {}
        self._gone: list[int] = []

    def watch(self, pid: int) -> None:
        if pid in self._pidfds or pid in self._start_times:
            return
        if hasattr(os, "pidfd_open"):
            try:
                self._pidfds[pid] = os.pidfd_open(pid)
                return
            except ProcessLookupError:
                self._gone.append(pid)
                return
            except OSError:
                pass  # no pidfds here (old kernel, seccomp): fall back on start times
        try:
            self._start_times[pid] = psutil.Process(pid).create_time()
        except psutil.Error:
            self._gone.append(pid)

    def unwatch(self, pid: int) -> None:
        fd = self._pidfds.pop(pid, None)
        if fd is not None:
            os.close(fd)
        self._start_times.pop(pid, None)

    def gone(self) -> list[int]:
        """The watched processes that exited since the last call (they are no longer watched)."""
        gone, self._gone = self._gone, []
        if self._pidfds:
            poller = select.poll()
            by_fd = {}
            for pid, fd in self._pidfds.items():
                poller.register(fd, select.POLLIN)
                by_fd[fd] = pid
            gone.extend(by_fd[fd] for fd, _ in poller.poll(0))
        for pid, started in self._start_times.items():
            try:
                process = psutil.Process(pid)
                # An exited process its parent has not reaped yet maps nothing any more.
                if process.create_time() != started or process.status() == psutil.STATUS_ZOMBIE:
                    gone.append(pid)
            except psutil.NoSuchProcess:
                gone.append(pid)
            except psutil.Error:
                pass
        for pid in gone:
            self.unwatch(pid)
        return gone

    def close(self) -> None:
        for pid in list(self._pidfds):
            self.unwatch(pid)
        self._start_times.clear()
