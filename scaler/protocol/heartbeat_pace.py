"""How often a worker heartbeats, and so how long its scheduler may stay silent before the worker moves on.

A worker starts at its own interval; the welcome may ask for more frequent heartbeats (never rarer: a scheduler
before PROTOCOL.md's revision 3 means "at least this often"); an echo may ask for rarer ones, when the scheduler
has so many workers that their heartbeats would cost it much (PROTOCOL.md, "Heartbeats spaced out at scale"),
and 0 in an echo brings back the welcome's. The silence threshold of the address rotation follows the interval:
a scheduler we hear from only as often as we heartbeat is not silent.

When an echo changes the interval, the next heartbeat comes at a random fraction of the new interval after the
last: workers of a join storm, which all learn of a spaced interval within a second or two, would otherwise
keep heartbeating in that burst once per interval, each burst a spike of the scheduler's work and latency.
"""

from __future__ import annotations

import random
from typing import Callable

from scaler.protocol.address_rotation import SILENT_HEARTBEATS, AddressRotation, silence_seconds
from scaler.protocol.message_types import Welcome


def longest_heartbeat_interval(death_timeout_seconds: float) -> float:
    """The rarest heartbeats a worker sends, whatever the scheduler asks: its silence threshold (SILENT_HEARTBEATS
    intervals, at most a third of the death timeout) then still spans that many of them."""
    return death_timeout_seconds / (3 * SILENT_HEARTBEATS)


class HeartbeatPace:
    """The interval, when the next heartbeat is due, and the silence threshold of `rotation`, kept in step.

    `phase()` draws the fraction of a changed interval after which the next heartbeat comes (0 to 1)."""

    def __init__(
        self, own_seconds: float, death_timeout_seconds: float, rotation: AddressRotation,
        phase: Callable[[], float] = random.random,
    ) -> None:
        self._own = own_seconds
        self._death_timeout = death_timeout_seconds
        self._rotation = rotation
        self._phase = phase
        self._welcome_interval = own_seconds
        self.interval = own_seconds
        self._last_sent: float | None = None
        self._next: float | None = None  # None: the first heartbeat is due at once
        rotation.set_silence(self.silence_seconds)

    def due(self, now: float) -> bool:
        return self._next is None or now >= self._next

    def sent(self, now: float) -> None:
        self._last_sent = now
        self._next = now + self.interval

    @property
    def silence_seconds(self) -> float:
        return silence_seconds(max(self.interval, self._own), self._death_timeout)

    def welcomed(self, welcome: Welcome) -> None:
        """The welcome's interval stands until an echo asks for another."""
        self._welcome_interval = welcome.heartbeat_interval_for(self._own)
        self._set(self._welcome_interval)

    def echoed(self, asked_ms: int) -> None:
        """An echo's `heartbeatIntervalMs` (0: the welcome's interval); a new interval takes a new phase."""
        interval = self._welcome_interval
        if asked_ms:
            interval = min(asked_ms / 1000, max(interval, longest_heartbeat_interval(self._death_timeout)))
        if self._set(interval) and self._last_sent is not None:
            self._next = self._last_sent + self._phase() * interval

    def _set(self, interval: float) -> bool:
        if interval == self.interval:
            return False
        self.interval = interval
        self._rotation.set_silence(self.silence_seconds)
        if self._last_sent is not None:
            self._next = self._last_sent + interval
        return True
