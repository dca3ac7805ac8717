"""Which of several scheduler addresses a peer talks to now: a pure state machine of (event, now).

A client, worker or store given several scheduler addresses (utility/scheduler_addresses.py) starts with the
first and moves on to the next (wrapping around) when
- the scheduler there says it stands by (`refused{standby}`): at once the first time, then after a wait that
  doubles up to LAST_MOVE_WAIT_SECONDS while refusals keep coming without a welcome in between, so that peers
  facing two standbys (the serving one unreachable) do not spin; or
- nothing was heard there for `silence_seconds` (the host is gone, or cut off).
A welcome resets the wait. With one address nothing ever moves: the behaviour of a single scheduler is unchanged.
The peer's shell reconnects its socket to the address `on_tick` returns; its own session rules (rejoin,
re-announcement, resubmission) decide what it says there.
"""

from __future__ import annotations

FIRST_MOVE_WAIT_SECONDS = 0.1
LAST_MOVE_WAIT_SECONDS = 2.0
# Silence before a peer tries the next address, in heartbeat intervals of its own, and at least this long.
SILENT_HEARTBEATS = 3
MIN_SILENCE_SECONDS = 1.0


def silence_seconds(heartbeat_interval_seconds: float, death_timeout_seconds: float) -> float:
    """How long a peer waits for a word from its scheduler before it tries the next address: a few missed
    heartbeat echoes, but well within its death timeout so that a standby is tried before the peer gives up."""
    wanted = max(SILENT_HEARTBEATS * heartbeat_interval_seconds, MIN_SILENCE_SECONDS)
    return min(wanted, death_timeout_seconds / 3)


class AddressRotation:
    def __init__(self, addresses: tuple[str, ...], silence_seconds: float, now: float = 0.0) -> None:
        if not addresses:
            raise ValueError("at least one scheduler address is needed")
        self.addresses = addresses
        self._silence_seconds = silence_seconds
        self._index = 0
        self._arrived_at = now
        self._move_at: float | None = None
        self._wait = 0.0

    def set_silence(self, silence_seconds: float) -> None:
        """The peer heartbeats at another interval (the scheduler asked): the silence threshold follows."""
        self._silence_seconds = silence_seconds

    @property
    def current(self) -> str:
        return self.addresses[self._index]

    @property
    def several(self) -> bool:
        return len(self.addresses) > 1

    def refused(self, now: float) -> None:
        """The scheduler at the current address stands by: move on, at once or after the doubling wait."""
        if not self.several or self._move_at is not None:
            return
        self._move_at = now + self._wait
        self._wait = min(max(self._wait * 2, FIRST_MOVE_WAIT_SECONDS), LAST_MOVE_WAIT_SECONDS)

    def welcomed(self) -> None:
        """A scheduler serves us here: stay, and a later refusal moves at once again."""
        self._wait = 0.0
        self._move_at = None

    def on_tick(self, now: float, last_heard: float) -> str | None:
        """The address to move to now (the socket reconnects there), or None to stay. `last_heard`: when a word
        (other than a standby's refusal) last came from a scheduler."""
        if not self.several:
            return None
        if self._move_at is not None:
            if now < self._move_at:
                return None
        elif now - max(last_heard, self._arrived_at) <= self._silence_seconds:
            return None
        self._index = (self._index + 1) % len(self.addresses)
        self._arrived_at = now
        self._move_at = None
        return self.current
