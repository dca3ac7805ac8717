"""How a child process tells the parent that started it whether it came up: one line per report, over a pipe.

The parent makes a `ReadinessPipe`, starts its children with `pass_fds=pipe.pass_fds` and
`env=pipe.child_environment(...)`, then reads `Report`s with a deadline. A child takes its end with
`ReadinessReporter.from_environment()` and writes `listening`, `registered` or `failed <why>`. A pipe
rather than a log line or a probe: it is private to the two processes, needs no port or file, and the
parent sees end-of-file as soon as every child holding it has exited, so a child that dies before it
reports is noticed at once instead of at the timeout. Lines shorter than PIPE_BUF are written
atomically, so several children (the workers of one cluster) can share one pipe.
"""

from __future__ import annotations

import dataclasses
import os
import select
import stat
import time

READY_FD_ENV = "SCALER_READY_FD"

LISTENING = "listening"
REGISTERED = "registered"
FAILED = "failed"

# Below PIPE_BUF (4096 on Linux, 512 guaranteed by POSIX), so one report is one atomic write.
_MAX_LINE_BYTES = 500


@dataclasses.dataclass(frozen=True)
class Report:
    state: str
    detail: str


class ReadinessReporter:
    """The child's end. Reporting never raises: a parent that is gone has nobody to tell."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd

    @staticmethod
    def from_environment() -> ReadinessReporter:
        """Take the pipe our parent passed (if any); our own children do not inherit the variable."""
        text = os.environ.pop(READY_FD_ENV, "")
        try:
            fd = int(text)
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                return ReadinessReporter(None)
        except (ValueError, OSError):
            return ReadinessReporter(None)
        os.set_inheritable(fd, False)
        return ReadinessReporter(fd)

    @property
    def active(self) -> bool:
        return self._fd is not None

    def report(self, state: str, detail: str = "") -> None:
        if self._fd is None:
            return
        line = f"{state} {' '.join(detail.split())}".strip().encode()[:_MAX_LINE_BYTES] + b"\n"
        try:
            os.write(self._fd, line)
        except OSError:
            self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class ReadinessPipe:
    """The parent's end: reports from every child started with it, until each of them has closed it."""

    def __init__(self) -> None:
        self._reader, self._writer = os.pipe()
        os.set_blocking(self._reader, False)
        self._buffer = b""
        self.closed_by_all = False

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return () if self._writer < 0 else (self._writer,)

    def child_environment(self, environment: dict[str, str]) -> dict[str, str]:
        return dict(environment, **{READY_FD_ENV: str(self._writer)})

    def children_started(self) -> None:
        """Call once every child holds its copy: from then on, end-of-file means they all closed it."""
        if self._writer >= 0:
            os.close(self._writer)
            self._writer = -1

    def read(self, timeout: float) -> list[Report]:
        """Reports that arrive within `timeout` seconds (returns at the first ones, or at end-of-file)."""
        if self._reader < 0 or self.closed_by_all:
            if timeout > 0:
                time.sleep(timeout)
            return []
        # poll, not select: a program holding over 1024 descriptors may well start a cluster.
        poller = select.poll()
        poller.register(self._reader, select.POLLIN)
        if not poller.poll(max(0.0, timeout) * 1000):
            return []
        chunks = []
        while True:
            try:
                chunk = os.read(self._reader, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self.closed_by_all = True
                break
            chunks.append(chunk)
        self._buffer += b"".join(chunks)
        *lines, self._buffer = self._buffer.split(b"\n")
        reports = []
        for line in lines:
            state, _, detail = line.decode(errors="replace").partition(" ")
            reports.append(Report(state, detail))
        return reports

    def close(self) -> None:
        self.children_started()
        if self._reader >= 0:
            os.close(self._reader)
            self._reader = -1
