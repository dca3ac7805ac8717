"""How much of what one task prints goes to its client, and when: the decisions of stream_output, with no I/O.

The capture (output_capture.py) feeds every write of the task, with the time; this decides what is kept and
what dropped, and when a batch of lines is due to leave. A task printing in a loop must not flood its worker's
link, the scheduler or the client, so its output is bounded four ways:

- **lines** are cut at `line_bytes`: the rest of the line is replaced by " [... N bytes cut]";
- **rate**: a token bucket of `bytes_per_second`, holding at most `burst_bytes`; a line that finds too few
  tokens is dropped whole (never half a line);
- **total**: at most `total_bytes` per task; every line after that is dropped;
- **batching**: lines leave together, at most every `flush_seconds` (the first at once), in messages of at most
  `message_bytes`; at the task's end, whatever is left, before its result.

What is dropped is counted, and the client learns it: each batch after a drop ends with a line on standard
error, "... N bytes of output dropped (...)", and so does the task's last batch. Only whole lines leave, but
for the last, unfinished line of each stream at the task's end, which gets a newline.
"""

from __future__ import annotations

import dataclasses

from scaler.protocol.messages import OutputStream

# One chunk: (OutputStream value, text of whole lines). One message: the chunks of one TaskOutput.
Chunk = tuple[int, str]


@dataclasses.dataclass(frozen=True)
class OutputLimits:
    bytes_per_second: int = 64 * 1024
    burst_bytes: int = 64 * 1024
    total_bytes: int = 1024 * 1024
    line_bytes: int = 8 * 1024
    flush_seconds: float = 0.05
    # Far below MAX_TASK_OUTPUT_MESSAGE_CHARS, which the scheduler enforces.
    message_bytes: int = 64 * 1024

    def describe(self) -> str:
        return (
            f"a task may send {_amount(self.bytes_per_second)}/s and {_amount(self.total_bytes)} in all;"
            f" lines are cut at {_amount(self.line_bytes)}"
        )


def _amount(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def _size(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


class TaskOutputLimiter:
    """The output of one task, from its start to its end."""

    def __init__(self, limits: OutputLimits, now: float) -> None:
        self._limits = limits
        self._tokens = float(limits.burst_bytes)
        self._refilled_at = now
        self._kept_bytes = 0
        # Per stream: the start of its current line, its size, and how many bytes of it were cut.
        self._partial: dict[int, list[str]] = {}
        self._partial_bytes: dict[int, int] = {}
        self._cut_bytes: dict[int, int] = {}
        # Whole lines admitted and not sent yet, in the order they were printed.
        self._pending: list[Chunk] = []
        self._pending_bytes = 0
        # Dropped since the last notice, and in all.
        self._dropped = 0
        self.dropped_total = 0
        self._last_sent: float | None = None

    def write(self, stream: int, text: str, now: float) -> None:
        """The task wrote `text` on `stream`."""
        while text:
            end = text.find("\n")
            if end < 0:
                self._add(stream, text, now, complete=False)
                return
            self._add(stream, text[:end], now, complete=True)
            text = text[end + 1:]

    def due(self, now: float) -> bool:
        """Whether the lines held should leave now."""
        if not self._pending:
            return False
        return (
            self._last_sent is None or now - self._last_sent >= self._limits.flush_seconds
            or self._pending_bytes >= self._limits.message_bytes
        )

    def take(self, now: float) -> list[list[Chunk]]:
        """The lines held, as messages of chunks (consecutive lines of one stream joined), and a drop notice."""
        self._last_sent = now
        lines, self._pending, self._pending_bytes = self._pending, [], 0
        if self._dropped:
            lines.append((int(OutputStream.STDERR), self._notice()))
            self._dropped = 0
        messages: list[list[Chunk]] = []
        message: list[Chunk] = []
        message_bytes = 0
        for stream, line in lines:
            size = _size(line)
            if message and message_bytes + size > self._limits.message_bytes:
                messages.append(message)
                message, message_bytes = [], 0
            if message and message[-1][0] == stream:
                message[-1] = (stream, message[-1][1] + line)
            else:
                message.append((stream, line))
            message_bytes += size
        if message:
            messages.append(message)
        return messages

    def finish(self, now: float) -> list[list[Chunk]]:
        """The task ended: its unfinished lines end, and everything left leaves, with a notice of what was dropped."""
        for stream in list(self._partial):
            self._add(stream, "", now, complete=True)
        return self.take(now)

    # ------------------------------------------------------------------------------------------ lines

    def _add(self, stream: int, piece: str, now: float, complete: bool) -> None:
        room = self._limits.line_bytes - self._partial_bytes.get(stream, 0)
        size = _size(piece)
        if size > room:
            kept = piece.encode("utf-8", "replace")[:max(room, 0)].decode("utf-8", "ignore")
            self._cut_bytes[stream] = self._cut_bytes.get(stream, 0) + size - _size(kept)
            piece, size = kept, _size(kept)
        if piece:
            self._partial.setdefault(stream, []).append(piece)
            self._partial_bytes[stream] = self._partial_bytes.get(stream, 0) + size
        elif not complete:
            return
        if not complete:
            return
        line = "".join(self._partial.pop(stream, ()))
        self._partial_bytes.pop(stream, None)
        cut = self._cut_bytes.pop(stream, 0)
        if cut:
            line += f" [... {cut:,} bytes cut]"
        self._admit(stream, line + "\n", now)

    def _admit(self, stream: int, line: str, now: float) -> None:
        limits = self._limits
        refill = (now - self._refilled_at) * limits.bytes_per_second
        self._tokens = min(float(limits.burst_bytes), self._tokens + refill)
        self._refilled_at = max(self._refilled_at, now)
        size = _size(line)
        if self._kept_bytes + size > limits.total_bytes or size > self._tokens:
            self._dropped += size
            self.dropped_total += size
            return
        self._tokens -= size
        self._kept_bytes += size
        self._pending.append((stream, line))
        self._pending_bytes += size

    def _notice(self) -> str:
        return f"... {self._dropped:,} bytes of output dropped ({self._limits.describe()})\n"
