"""The processor's capture of what a task submitted with stream_output prints, sent on to its client.

While such a task runs, `sys.stdout` and `sys.stderr` are replaced by streams that write here, and a handler
stands in for logging's last resort: a record that no configured handler takes (the usual case, a processor
configures none) is formatted as one line ("WARNING name: message"). A task that sets up logging itself
(logging.basicConfig) keeps its handlers, and those writing to sys.stderr write here as its standard error.
What a process writes to its file descriptors directly (a C library, a subprocess) is not seen: it still goes
to the worker's own output. Tasks that did not ask pay nothing: the processor checks one flag per task.

The decisions (what is kept, what dropped, when a batch leaves) are the limiter's (output_limits.py). The
processor's thread owns the socket, so only it sends: when the task's own thread writes and a batch is due,
and at the task's end, before its result. Threads the task started only add lines; theirs leave with the
next send of the task's thread, or at the task's end. A lock guards the limiter between those threads.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
import time
from typing import Callable, TextIO

from scaler.protocol import messages as m
from scaler.protocol.messages import OutputStream
from scaler.worker.output_limits import OutputLimits, TaskOutputLimiter

logger = logging.getLogger(__name__)

# The processor's own loggers: what they say while a task runs is the worker's business, not the task's.
_OWN_LOGGERS = "scaler.worker"


class TaskOutputCapture:
    def __init__(self, send: Callable[[m.TaskOutput], None], limits: OutputLimits | None = None) -> None:
        self._send = send
        self._limits = limits or OutputLimits()
        self._lock = threading.RLock()
        self._limiter: TaskOutputLimiter | None = None
        self._task_id = 0
        self._owner = 0
        self._pid = 0
        self._sending = False
        self._saved: tuple[TextIO, TextIO] | None = None
        self._saved_last_resort: logging.Handler | None = None
        self._handler = _RecordLines(self)

    def start(self, task_id: int) -> None:
        """The task's code starts: what it prints from now on is captured."""
        with self._lock:
            self._limiter = TaskOutputLimiter(self._limits, time.monotonic())
            self._task_id = task_id
            self._owner = threading.get_ident()
            self._pid = os.getpid()
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout = _CapturedStream(self, OutputStream.STDOUT, sys.stdout)  # type: ignore[assignment]
        sys.stderr = _CapturedStream(self, OutputStream.STDERR, sys.stderr)  # type: ignore[assignment]
        # Python's last resort: what handles a record when no handler is configured. Swapping it, not adding a
        # handler to the root logger, leaves the task's own logging set-up (logging.basicConfig) working; the
        # handlers that set-up makes write into the streams above.
        self._saved_last_resort, logging.lastResort = logging.lastResort, self._handler

    def finish(self) -> None:
        """The task's code ended: the streams are given back, and what is left is sent, before the result."""
        logging.lastResort = self._saved_last_resort
        if self._saved is not None:
            sys.stdout, sys.stderr = self._saved
            self._saved = None
        with self._lock:
            limiter, self._limiter = self._limiter, None
            messages = limiter.finish(time.monotonic()) if limiter is not None else []
        self._send_all(messages)

    def write(self, stream: int, text: str) -> bool:
        """Take what the task wrote; False if this is not the task's process (a child it forked, which must not
        touch the processor's socket), for the caller to write it where it would have gone."""
        if os.getpid() != self._pid:
            return False
        with self._lock:
            limiter = self._limiter
            if limiter is None:
                return False  # after the task (a thread it left, a handler it set up): as if not captured
            now = time.monotonic()
            limiter.write(stream, text, now)
            if self._sending or threading.get_ident() != self._owner or not limiter.due(now):
                return True
            messages = limiter.take(now)
            self._sending = True
        try:
            self._send_all(messages)
        finally:
            self._sending = False
        return True

    def pass_on(self, record: logging.LogRecord) -> None:
        """A record of the processor's own, which the last resort we stand in for handles as it would have."""
        fallback = self._saved_last_resort
        if fallback is not None and record.levelno >= fallback.level:
            fallback.handle(record)

    def _send_all(self, messages: list[list[tuple[int, str]]]) -> None:
        task_id = self._task_id
        try:
            for chunks in messages:
                self._send(m.TaskOutput(
                    task_ids=[task_id] * len(chunks), streams=[stream for stream, _ in chunks],
                    texts=[text for _, text in chunks],
                ))
        except Exception as error:  # the task's print must not fail because its output could not be sent
            logger.warning(f"processor: could not send the output of task {task_id:#x}: {error!r}")


class _CapturedStream(io.TextIOBase):
    """What a task sees as sys.stdout or sys.stderr while its output is captured."""

    def __init__(self, capture: TaskOutputCapture, stream: int, original: TextIO) -> None:
        self._capture = capture
        self._stream = int(stream)  # capnp takes plain ints, not enum members
        self._original = original

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not self._capture.write(self._stream, text):
            # A forked child's write: where it would have gone, flushed now (the child's exit flushes only
            # sys.stdout and sys.stderr, which are these streams).
            self._original.write(text)
            self._original.flush()
        return len(text)

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._original.fileno()  # writes to the descriptor itself go to the worker's output

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def buffer(self) -> object:
        return self._original.buffer  # bytes written there go to the worker's output, as a descriptor's do


class _RecordLines(logging.Handler):
    def __init__(self, capture: TaskOutputCapture) -> None:
        super().__init__()
        self._capture = capture
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(_OWN_LOGGERS):
            self._capture.pass_on(record)
            return
        try:
            line = self.format(record) + "\n"
            if not self._capture.write(int(OutputStream.LOG), line) and sys.__stderr__ is not None:
                sys.__stderr__.write(line)
        except Exception:
            self.handleError(record)
