"""The scheduler's limits on what it reads, checked in the caller before anything is queued.

ZeroMQ drops an over-limit frame before the scheduler sees it, so sending one would lose the message
without a word (PROTOCOL.md §10): PayloadTooLargeError, raised at the call that made the payload, is
the word. Both limits come with the scheduler's Welcome; 0 means none.
"""

from __future__ import annotations

from typing import Sequence

from scaler.errors import PayloadTooLargeError
from scaler.protocol import messages as m


class PayloadLimits:
    def __init__(self, max_frame_bytes: int = 0, max_control_frame_bytes: int = 0) -> None:
        self._max_frame_bytes = max_frame_bytes
        # What small payloads may take in one message: half the control-frame limit, leaving room for the
        # rest of the encoding.
        self.inline_budget = max_control_frame_bytes // 2

    def check_payload(self, payload: m.Buffer, what: str) -> None:
        """Raise PayloadTooLargeError for a payload at or over the scheduler's limit per frame."""
        self.check_size(len(payload), what)

    def check_size(self, size: int, what: str) -> None:
        """Raise PayloadTooLargeError for a payload of `size` bytes at or over the scheduler's limit per frame, also
        when it goes through a store: a stored object comes back on the control path when its store fails, and a
        payload this large is better refused at the call than read, copied and lent first. A payload must stay
        under the limit (PROTOCOL.md §10), so one exactly at it is refused too."""
        limit = self._max_frame_bytes
        if limit and size >= limit:
            raise PayloadTooLargeError(
                f"{what} of {size:,} bytes is {'at' if size == limit else 'over'} the scheduler's limit of "
                f"{limit:,} bytes per frame "
                "(--max-message-size-bytes); send less per task, or start the scheduler with a higher limit"
            )

    def check_arguments(self, args: Sequence[m.Buffer], width: int) -> int:
        """Raise PayloadTooLargeError for task arguments the scheduler would not read; returns their inline bytes.

        `args` holds the arguments of tasks of `width` arguments each, row by row.
        """
        if not args:
            return 0
        self.check_payload(max(args, key=len), "an argument")
        budget = self.inline_budget
        if budget and width * m.LARGE_PAYLOAD_BYTES > budget:  # else no task can reach the budget
            for start in range(0, len(args), width):
                inline = m.inline_bytes(args[start:start + width])
                if inline > budget:
                    raise PayloadTooLargeError(
                        f"the arguments of one task take {inline:,} bytes in the message itself, over the "
                        f"scheduler's limit of {budget * 2:,} bytes (--max-control-frame-bytes); pass large "
                        "data as fewer, bigger arguments (64 KiB or more each) or with send_object()"
                    )
        return m.inline_bytes(args)

    def check_graph(self, groups: Sequence[m.TaskGroup]) -> None:
        """Raise PayloadTooLargeError for a graph whose literal arguments cannot travel in one message."""
        inline = sum(self.check_arguments(group.args, group.args_per_task) for group in groups)
        if self.inline_budget and inline > self.inline_budget:
            raise PayloadTooLargeError(
                f"this graph's literal arguments take {inline:,} bytes in one message, over the scheduler's "
                f"limit of {self.inline_budget * 2:,} bytes (--max-control-frame-bytes); compute it in "
                "several get() calls, or send large literals with send_object()"
            )
