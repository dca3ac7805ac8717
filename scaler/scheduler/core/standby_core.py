"""Whether a standby scheduler serves: a pure state machine of (event, now).

A scheduler started with `--standby-of ADDRESSES` ranks after the schedulers it names (in that order). It asks
each of them every `probe_seconds` whether it serves: it sends a heartbeat, which a serving scheduler answers
with `refused{unknownPeer}` (it does not know the prober) and a standing-by one with `refused{standby}`.
- Standing by (at start, too): it serves nobody; every peer is told `refused{standby}` and tries its next
  address. Once no scheduler ranked before it was heard serving for `takeover_seconds`, it serves.
- Serving: as soon as one ranked before it answers as serving (a partition healed, or the first host came
  back), it steps down: the shell tells every peer it had `refused{standby}`, forgets them (a fresh core), and
  stands by again. The peers rejoin the serving one as after a restart (PROTOCOL.md §21).
The earlier address always wins, so two schedulers that both serve (each cut off from the other) settle on
one at the first answer that crosses, with no vote and no third party.
"""

from __future__ import annotations

import dataclasses
from typing import Union


@dataclasses.dataclass(frozen=True)
class Probe:
    """Send a heartbeat to each scheduler ranked before this one."""


@dataclasses.dataclass(frozen=True)
class Serve:
    """Accept peers from now on: no scheduler ranked before this one serves."""

    silent_seconds: float


@dataclasses.dataclass(frozen=True)
class StepDown:
    """The scheduler at `address` (ranked before this one) serves: tell every peer to go, forget them, stand by."""

    address: str


StandbyAction = Union[Probe, Serve, StepDown]


class StandbyCore:
    def __init__(
        self, ranked_before: tuple[str, ...], takeover_seconds: float, probe_seconds: float, now: float
    ) -> None:
        self.ranked_before = ranked_before
        self._takeover_seconds = takeover_seconds
        self._probe_seconds = probe_seconds
        self.serving = False
        # The scheduler last heard serving, and when: a standby assumes at start that the first one serves.
        self.serving_address = ranked_before[0]
        self._last_serving_seen = now
        self._next_probe = now

    def on_answer(self, address: str, standby: bool, now: float) -> list[StandbyAction]:
        """The scheduler at `address` answered a probe: it serves unless it said it stands by."""
        if standby or address not in self.ranked_before:
            return []
        self.serving_address = address
        self._last_serving_seen = now
        if not self.serving:
            return []
        self.serving = False
        return [StepDown(address)]

    def on_tick(self, now: float) -> list[StandbyAction]:
        out: list[StandbyAction] = []
        if now >= self._next_probe:
            self._next_probe = now + self._probe_seconds
            out.append(Probe())
        silent = now - self._last_serving_seen
        if not self.serving and silent > self._takeover_seconds:
            self.serving = True
            out.append(Serve(silent))
        return out
