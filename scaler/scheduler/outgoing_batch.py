"""What the scheduler sends for the messages of one wake, with the results bound for one client merged.

The core answers each worker's results message with one results message to each client concerned. With
hundreds of workers each returning a few tasks at a time, that is one message to the client for every few
tasks: most of the scheduler's sends and most of the client's receives. The I/O shell handles up to a few
hundred messages per wake; the results for one client among them go out as one message.

Nothing is reordered for any peer: results merge only into the client's latest message, and only if nothing
else was addressed to that client since. Merging stops at a size, so a message never nears the frame limits.
"""

from __future__ import annotations

from scaler.protocol import messages as m
from scaler.scheduler.core.outgoing import Outgoing

# A merged message stops taking more at this many tasks or payload bytes (far below any frame limit).
_MAX_MERGED_TASKS = 10_000
_MAX_MERGED_BYTES = 1 << 20


class OutgoingBatch:
    def __init__(self) -> None:
        self._outgoing: list[Outgoing] = []
        # Per client identity: the index in _outgoing of a results message that may take more, and its bytes.
        self._open: dict[bytes, tuple[int, int]] = {}
        self.handled = 0

    def add(self, outgoing: list[Outgoing]) -> None:
        """What the core returned for one message (or tick)."""
        self.handled += 1
        for identity, message in outgoing:
            if type(message) is m.TaskResults:
                open_results = self._open.get(identity)
                size = sum(map(len, message.payloads))
                if open_results is not None:
                    index, merged_size = open_results
                    merged = self._outgoing[index][1]
                    assert isinstance(merged, m.TaskResults)
                    if merged_size + size <= _MAX_MERGED_BYTES and _task_count(merged) < _MAX_MERGED_TASKS:
                        _merge(merged, message)
                        self._open[identity] = (index, merged_size + size)
                        continue
                self._open[identity] = (len(self._outgoing), size)
            elif identity in self._open:
                del self._open[identity]
            self._outgoing.append((identity, message))

    def take(self) -> list[Outgoing]:
        outgoing, self._outgoing = self._outgoing, []
        self._open.clear()
        self.handled = 0
        return outgoing


def _task_count(results: m.TaskResults) -> int:
    return len(results.succeeded_ids) + len(results.failures) + len(results.stored)


def _merge(into: m.TaskResults, results: m.TaskResults) -> None:
    into.succeeded_ids.extend(results.succeeded_ids)
    into.payloads.extend(results.payloads)
    into.failures.extend(results.failures)
    into.stored.extend(results.stored)
    into.warnings.extend(results.warnings)
    into.profiles.extend(results.profiles)
