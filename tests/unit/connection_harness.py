"""A client connection core with no socket: what callers queue, what the scheduler sends, and what comes out.

The sinks record every outcome they get, so tests can check that each task got exactly one.
"""

from __future__ import annotations

import collections
from typing import Any, Sequence

from scaler.client.connection_actions import Action, Ended, Send, SendHeartbeat, Welcomed
from scaler.client.connection_core import ClientConnectionCore
from scaler.client.outbox import TaskBatch
from scaler.protocol import messages as m
from scaler.protocol.task_signature import TaskSignature

ADDRESS = "tcp://scheduler:1"
SIGNATURE = TaskSignature(function_id=b"f" * 16, args_per_task=1)


class RecordingSink:
    """A sink that keeps every outcome it is handed, per task id, in order."""

    def __init__(self) -> None:
        self.outcomes: dict[int, list[tuple[str, Any]]] = collections.defaultdict(list)

    def deliver(self, task_id: int, payload: m.Buffer) -> None:
        self.outcomes[task_id].append(("result", bytes(payload)))

    def fail(self, task_id: int, error: BaseException) -> None:
        self.outcomes[task_id].append(("failed", error))

    def mark_canceled(self, task_id: int) -> None:
        self.outcomes[task_id].append(("canceled", None))

    def hold_warning(self, task_id: int, warning: m.TaskWarning) -> None:
        pass


def batch(task_ids: list[int], sink: RecordingSink) -> TaskBatch:
    args = [f"{task_id}".encode() for task_id in task_ids]
    return TaskBatch(SIGNATURE, task_ids, args, [], m.inline_bytes(args), sink)


def welcome(heartbeat_interval_ms: int = 0, peer_timeout_ms: int = 0) -> m.Welcome:
    return m.Welcome(id_prefix=7, heartbeat_interval_ms=heartbeat_interval_ms, peer_timeout_ms=peer_timeout_ms)


def succeeded(*task_ids: int) -> m.TaskResults:
    return m.TaskResults(list(task_ids), [f"r{task_id}".encode() for task_id in task_ids], [])


class SimulatedConnection:
    """The core, with the requests queue a caller fills and a record of everything the shell was told to do."""

    def __init__(self, timeout_seconds: float = 10.0, heartbeat_interval_seconds: float = 1.0) -> None:
        self.core = ClientConnectionCore(
            ADDRESS, m.Hello(role=m.Role.CLIENT, name="test"), timeout_seconds, heartbeat_interval_seconds
        )
        self.queued: collections.deque[Any] = collections.deque()
        self.actions: list[Action] = []
        self.now = 0.0
        self.act(self.core.start(self.now))

    def act(self, actions: Sequence[Action]) -> list[Action]:
        self.actions.extend(actions)
        return list(actions)

    def queue(self, *items: Any) -> list[Action]:
        self.queued.extend(items)
        return self.act(self.core.on_requests(self.queued, self.now))

    def receive(self, message: m.Message) -> list[Action]:
        return self.act(self.core.on_message(message, self.now))

    def tick(self, seconds: float = 0.0) -> list[Action]:
        self.now += seconds
        return self.act(self.core.on_tick(self.now))

    def sent(self) -> list[m.Message]:
        """Every message the shell was told to send, heartbeats as m.Heartbeat()."""
        return [
            action.message if isinstance(action, Send) else m.Heartbeat()
            for action in self.actions if isinstance(action, (Send, SendHeartbeat))
        ]

    def sent_task_ids(self) -> list[int]:
        return [
            task_id for message in self.sent() if isinstance(message, m.TaskSubmission)
            for group in message.groups for task_id in group.task_ids
        ]

    def ended(self) -> list[Ended]:
        return [action for action in self.actions if isinstance(action, Ended)]

    def welcomed(self) -> list[Welcomed]:
        return [action for action in self.actions if isinstance(action, Welcomed)]
