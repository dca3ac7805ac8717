"""The client's requests that wait for the scheduler's answer (clear, drain_workers, shutdown): the rules.

Answers carry no request id: at most one request of a kind is in flight, so an answer of that kind is the
answer to the one waiting for it (two in flight at once would swap answers). A second request of a kind
waits here, unsent, until the first has its answer or times out. The scheduler answers in order, so an
answer that comes after its request timed out is dropped, not taken by the next request of that kind.

Pure: part of the connection core (connection_core.py), driven by its thread with the time passed in. The
callers wait on the request's Reply, which this settles: with the answer, or an error at the deadline.
"""

from __future__ import annotations

import collections
import dataclasses

from scaler.client.connection_actions import SchedulerRequest
from scaler.errors import ConnectionFailedError
from scaler.protocol import messages as m


@dataclasses.dataclass(slots=True)
class _Waiting:
    request: SchedulerRequest
    deadline: float
    sent: bool = False


class SchedulerRequests:
    def __init__(self) -> None:
        # Per answer type, the requests of that type in arrival order; the first is the one sent.
        self._by_type: dict[type, collections.deque[_Waiting]] = {}
        self._late_answers: dict[type, int] = {}  # answers to sent requests that timed out, still to come

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._by_type.values())

    def is_waiting(self, reply_type: type) -> bool:
        return any(waiting.sent for waiting in self._by_type.get(reply_type, ()))

    def next_deadline(self) -> float | None:
        deadlines = [waiting.deadline for queue in self._by_type.values() for waiting in queue]
        return min(deadlines) if deadlines else None

    def add(self, request: SchedulerRequest, now: float) -> m.Message | None:
        """A new request: the message to send now, or None while one of its kind is in flight."""
        queue = self._by_type.setdefault(request.reply_type, collections.deque())
        waiting = _Waiting(request, now + request.timeout_seconds)
        queue.append(waiting)
        if len(queue) > 1:
            return None
        waiting.sent = True
        return request.message

    def answer(self, message: m.Message) -> m.Message | None:
        """An answer from the scheduler: to the request sent for it (if any); returns the next request's message
        of that kind to send, if one waits."""
        reply_type = type(message)
        late = self._late_answers.get(reply_type, 0)
        if late:
            self._late_answers[reply_type] = late - 1
            return None
        queue = self._by_type.get(reply_type)
        if not queue or not queue[0].sent:
            return None  # an answer nobody asked for (or asked for by another client of this process)
        queue.popleft().request.reply.give(message)
        return self._send_next(queue)

    def expire(self, now: float) -> list[m.Message]:
        """Requests past their deadline fail; returns the messages of requests that may go out now instead."""
        to_send: list[m.Message] = []
        for reply_type, queue in self._by_type.items():
            if not any(waiting.deadline <= now for waiting in queue):
                continue
            head_sent = bool(queue) and queue[0].sent
            kept: collections.deque[_Waiting] = collections.deque()
            for waiting in queue:
                if waiting.deadline > now:
                    kept.append(waiting)
                    continue
                name = reply_type.__name__
                if waiting.sent:
                    self._late_answers[reply_type] = self._late_answers.get(reply_type, 0) + 1
                    waiting.request.reply.fail(ConnectionFailedError(
                        f"no {name} from the scheduler within {waiting.request.timeout_seconds:g}s"
                    ))
                else:
                    waiting.request.reply.fail(ConnectionFailedError(
                        f"no {name} from the scheduler within {waiting.request.timeout_seconds:g}s (another request "
                        "of this kind from this client was still waiting for its own)"
                    ))
            self._by_type[reply_type] = kept
            if head_sent and kept and not kept[0].sent:
                message = self._send_next(kept)
                if message is not None:
                    to_send.append(message)
        return to_send

    def send_again(self) -> list[m.Message]:
        """A new scheduler took this client back: the requests sent to the old one will get no answer, and no
        late answer is still to come; their messages go again (each keeps its deadline)."""
        self._late_answers.clear()
        return [queue[0].request.message for queue in self._by_type.values() if queue and queue[0].sent]

    def fail_all(self, error: BaseException) -> None:
        """The link is over: every request still waiting gets `error`."""
        queues, self._by_type = self._by_type, {}
        for queue in queues.values():
            for waiting in queue:
                waiting.request.reply.fail(error)

    @staticmethod
    def _send_next(queue: collections.deque[_Waiting]) -> m.Message | None:
        if not queue:
            return None
        queue[0].sent = True
        return queue[0].request.message
