"""How threads that queue work wake the client's I/O thread: one byte in a pipe that the thread polls.

At most one byte waits in the pipe; a flag says one is there, so that a burst of submits writes once.
"""

from __future__ import annotations

import os


class WakeupPipe:
    def __init__(self) -> None:
        self.reader, self._writer = os.pipe()
        # Two threads may consume (the I/O thread, and a caller serving the link: caller_read.py): the one that
        # comes second finds the pipe empty, and must not block on it.
        os.set_blocking(self.reader, False)
        self._pending = False

    def wake(self) -> None:
        """Any thread: make the I/O thread look at its outbox."""
        if not self._pending:
            self._pending = True
            try:
                os.write(self._writer, b"\0")
            except OSError:
                pass  # closed: the thread is gone

    def consume(self) -> None:
        """The baton's holder: take the wake-up bytes, then let callers wake us again (in this order).

        Clearing the flag first would lose a wake-up: a caller could write its byte in between, which the
        read then swallows while the flag stays set. Every later wake() would then write nothing, and
        each message would wait for the I/O thread's idle poll timeout to go out.
        """
        try:
            os.read(self.reader, 65536)
        except BlockingIOError:
            pass  # another consumer took the byte; what it woke us for was served by that one
        self._pending = False

    def silence(self) -> None:
        """In a forked child: the pipe is shared with the parent's I/O thread, so never write to it."""
        self._pending = True

    def close(self) -> None:
        for descriptor in (self.reader, self._writer):
            try:
                os.close(descriptor)
            except OSError:
                pass
