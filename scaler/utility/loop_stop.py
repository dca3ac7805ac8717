"""Asking a poll loop to end, from any thread or a signal handler, so that it wakes at once.

A flag alone is seen only when the loop's poll next returns (pyzmq resumes a poll that a signal
interrupted), so a loop waiting for its next tick would exit up to a tick late. A byte written into a
pipe that the loop also polls ends the wait at once. A loop that other threads also hand work to (the
Symphony worker: answers from the SDK's threads) wakes through the same pipe with `wake`, and drains it.
"""

from __future__ import annotations

import os
import threading


class LoopStop:
    def __init__(self) -> None:
        self._requested = threading.Event()
        self._read = self._write = -1

    def open(self) -> None:
        """Make the pipe the loop polls (`fileno`); `close` it when the loop is over."""
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        self._read, self._write = read, write

    def fileno(self) -> int:
        return self._read

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def request(self) -> None:
        self._requested.set()
        self.wake()

    def wake(self) -> None:
        """Any thread: end the loop's current wait, without asking it to stop."""
        if self._write < 0:
            return  # the loop is not running (or over): it sees the flag when it starts, if ever
        try:
            os.write(self._write, b"\0")
        except OSError:  # full: a wake-up is pending anyway
            pass

    def drain(self) -> None:
        """The loop, woken by the pipe: take its bytes, so that the next poll waits again."""
        try:
            while os.read(self._read, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        descriptors = (self._read, self._write)
        self._read = self._write = -1  # before closing: request() must not write to a reused number
        for descriptor in descriptors:
            if descriptor >= 0:
                os.close(descriptor)
