"""What the worker agent's core and its I/O shell tell each other, besides the messages themselves.

The core (agent_core.py) answers every event with a list of actions, carried out by the shell
(agent.py) in order. What the shell observes of its processors reaches the core in two ways: the
running-task slots through a read-only view (RunningTasks) that the core reads only at the moment of a
decision, and memory and CPU figures as values of the tick (the usage a heartbeat reports travels in
the Heartbeat's own fields). Why the slots are a view and not values of the events is said in
agent_core.py.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol, Union

from scaler.protocol import messages as m


class RunningTasks(Protocol):
    """The running-task slots (running_task_slot.py), read-only: which task a processor started last."""

    def running_task_id(self, identity: bytes) -> int:
        """The slot's task id; NO_TASK for a processor the shell has not started yet."""
        ...


@dataclasses.dataclass(slots=True)
class ToScheduler:
    """Send these frames to the scheduler; a processor's are forwarded as they came, never re-encoded."""

    frames: list[m.Buffer]
    # A heartbeat: sent only if it can go at once, so that the loop never blocks on a dead connection.
    may_drop: bool = False


@dataclasses.dataclass(slots=True)
class ToProcessor:
    """Send these frames to a processor that has said hello."""

    identity: bytes
    frames: list[m.Buffer]


@dataclasses.dataclass(slots=True)
class ProcessorAction:
    """Something the shell does to one processor process."""

    identity: bytes


class StartProcessor(ProcessorAction):
    """Start a processor process with this identity (and a new running-task slot)."""

    __slots__ = ()


class StopProcessor(ProcessorAction):
    """Stop (or reap) this processor and the processes its tasks started, and remove its slot."""

    __slots__ = ()


@dataclasses.dataclass(slots=True)
class SignalProcessor(ProcessorAction):
    """Send the processor AGENT_SIGNAL: it reads its socket now, while its task runs (see processor.py).

    `urgent_sent` (the urgent messages sent it so far) goes into its running-task slot first: the processor
    reads until it has handled that many, even if the signal overtakes the last of them.
    """

    urgent_sent: int


@dataclasses.dataclass(slots=True)
class Reconnect:
    """Connect the scheduler socket to this address instead (the next of several: protocol/address_rotation.py)."""

    address: str


@dataclasses.dataclass(slots=True)
class Registered:
    """The scheduler welcomed us for the first time: tell whoever started us that we are ready."""


@dataclasses.dataclass(slots=True)
class Exit:
    """Leave the loop, logging why at `level`; `failed` makes the process exit with status 1."""

    reason: str
    failed: bool = False
    level: int = logging.INFO


Action = Union[ToScheduler, ToProcessor, StartProcessor, StopProcessor, SignalProcessor, Reconnect, Registered, Exit]
