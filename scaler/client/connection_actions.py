"""What flows into the client connection's core besides scheduler messages, and what flows out of it.

In: requests that caller and fetch threads queue for the I/O thread (besides TaskBatch, ObjectPayload and
plain messages, see outbox.py): a graph with its futures, tasks to forget, "cancel everything pending", and a
request that waits for the scheduler's answer. Out: actions the I/O shell carries out in order.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from typing import Union

from scaler.client.future import ScalerFuture
from scaler.protocol import messages as m

# ---------------------------------------------------------------------------------------------- requests in


@dataclasses.dataclass(slots=True)
class GraphRequest:
    """A graph: its futures (wanted tasks), its quiet tasks (for warnings), and the message that carries it."""

    submission: m.TaskSubmission
    futures: dict[int, ScalerFuture]


@dataclasses.dataclass(slots=True)
class ForgetTasks:
    """The caller no longer wants these outcomes (a failed map cancels the rest)."""

    task_ids: list[int]


@dataclasses.dataclass(slots=True)
class CancelPending:
    """clear(): every task still waiting ends canceled; `done` is set once that happened."""

    done: threading.Event = dataclasses.field(default_factory=threading.Event)


class Reply:
    """The hand-off of one scheduler request's answer (or the error that ends its wait) to the waiting caller."""

    __slots__ = ("_event", "message", "error")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.message: m.Message | None = None
        self.error: BaseException | None = None

    def give(self, message: m.Message) -> None:
        self.message = message
        self._event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._event.set()

    @property
    def settled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


@dataclasses.dataclass(slots=True)
class SchedulerRequest:
    """A message whose answer of `reply_type` the caller waits for, up to `timeout_seconds` from its receipt."""

    message: m.Message
    reply_type: type
    timeout_seconds: float
    reply: Reply


# ---------------------------------------------------------------------------------------------- actions out


@dataclasses.dataclass(slots=True)
class Send:
    message: m.Message


@dataclasses.dataclass(slots=True)
class Reconnect:
    """Connect the socket to this scheduler address instead (the next of several: protocol/address_rotation.py)."""

    address: str


@dataclasses.dataclass(slots=True)
class SendHeartbeat:
    """A heartbeat, dropped if zmq cannot take it now (one that waits behind others is worth nothing)."""


@dataclasses.dataclass(slots=True)
class SweepStores:
    """Once per heartbeat: the store links' own housekeeping."""


@dataclasses.dataclass(slots=True)
class Fetch:
    """Stored results of tasks still waiting: to the fetch thread."""

    stored: list[m.StoredResult]


@dataclasses.dataclass(slots=True)
class Welcomed:
    welcome: m.Welcome


@dataclasses.dataclass(slots=True)
class DirectoryChanged:
    directory: m.StoreDirectory


@dataclasses.dataclass(slots=True)
class DeliverRelay:
    relay: m.Relay


@dataclasses.dataclass(slots=True)
class ResendObjects:
    """The scheduler lost objects of ours: store them again (I/O), and hand the core what names them now."""

    object_ids: list[bytes]


@dataclasses.dataclass(slots=True)
class ShowOutput:
    """What tasks submitted with stream_output printed: to the client's sys.stdout and sys.stderr, now."""

    output: m.TaskOutput


class EndKind(enum.Enum):
    REFUSED = "refused"  # the scheduler would not take us (before the welcome)
    LOST = "lost"  # silent past the timeout, closed on us, or forgot us
    UNREACHABLE = "unreachable"  # no welcome within the timeout
    FAILED = "failed"  # the I/O thread failed


@dataclasses.dataclass(slots=True)
class Ended:
    """The link is over: every outcome still pending got `error`; the shell stops its thread."""

    kind: EndKind
    error: BaseException


Action = Union[
    Send, SendHeartbeat, SweepStores, Fetch, Welcomed, DirectoryChanged, DeliverRelay, ResendObjects, ShowOutput, Ended,
    Reconnect,
]
Request = Union[GraphRequest, ForgetTasks, CancelPending, SchedulerRequest]
