"""The decisions of `scaler FILE.toml`: when to start each part, when the site is up, when and why to stop it.

A pure core: `handle(event, now)` returns actions; the shell (scaler/cli/site.py) starts the processes, reads
their readiness pipes and output, and turns what it sees into events. Parts start stage by stage: a stage
starts once every part of the one before has reported what its command reports once up (the scheduler and
a store `listening`, a cluster `registered`), each stage within `start_timeout_seconds`. Every part runs
until the site stops, so a part that exits (whatever its status) or fails to start is a failure: the site
says which part and why, and stops the rest with status 1. A signal stops the site with status 0.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence, Union

from scaler.cli.site_plan import Part
from scaler.utility.readiness import FAILED

# ------------------------------------------------------------------------------------------------- events


@dataclasses.dataclass(frozen=True)
class Begin:
    pass


@dataclasses.dataclass(frozen=True)
class Reported:
    """A line from a part's readiness pipe."""

    part: str
    state: str
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class CouldNotStart:
    part: str
    why: str


@dataclasses.dataclass(frozen=True)
class Exited:
    part: str
    status: int  # negative: killed by that signal
    last_lines: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Tick:
    pass


@dataclasses.dataclass(frozen=True)
class StopAsked:
    why: str  # "SIGTERM"


Event = Union[Begin, Reported, CouldNotStart, Exited, Tick, StopAsked]

# ------------------------------------------------------------------------------------------------ actions


@dataclasses.dataclass(frozen=True)
class Start:
    part: Part


@dataclasses.dataclass(frozen=True)
class Say:
    message: str
    error: bool = False


@dataclasses.dataclass(frozen=True)
class StopAll:
    """Stop every part still running (the last started first), then exit with `status`."""

    status: int


Action = Union[Start, Say, StopAll]

STARTING = "starting"
RUNNING = "running"
STOPPING = "stopping"


class SiteCore:
    def __init__(self, parts: Sequence[Part], start_timeout_seconds: float) -> None:
        self._stages = sorted({part.stage for part in parts})
        self._parts = list(parts)
        self._timeout = start_timeout_seconds
        self._stage_index = -1
        self._deadline = 0.0
        self._waiting: set[str] = set()  # parts of the current stage not up yet
        self.state = STARTING

    def handle(self, event: Event, now: float) -> list[Action]:
        if self.state == STOPPING:
            return []
        if isinstance(event, Begin):
            return self._next_stage(now)
        if isinstance(event, StopAsked):
            return self._stop(0, Say(f"stopping on {event.why}"))
        if isinstance(event, CouldNotStart):
            return self._stop(1, Say(f"{event.part} could not start: {event.why}", error=True))
        if isinstance(event, Exited):
            return self._stop(1, Say(self._exit_message(event), error=True))
        if isinstance(event, Reported):
            return self._on_report(event, now)
        if isinstance(event, Tick) and self.state == STARTING and now >= self._deadline:
            late = ", ".join(sorted(self._waiting))
            return self._stop(1, Say(f"{late} did not come up within {self._timeout:g} s", error=True))
        return []

    def _on_report(self, event: Reported, now: float) -> list[Action]:
        if event.state == FAILED:
            return self._stop(1, Say(f"{event.part} could not start: {event.detail}", error=True))
        part = next((part for part in self._parts if part.name == event.part), None)
        if part is None or event.state != part.ready_when or event.part not in self._waiting:
            return []
        self._waiting.discard(event.part)
        actions: list[Action] = [Say(f"{event.part} is up" + (f": {event.detail}" if event.detail else ""))]
        if not self._waiting:
            actions += self._next_stage(now)
        return actions

    def _next_stage(self, now: float) -> list[Action]:
        actions: list[Action] = []
        while not self._waiting:
            self._stage_index += 1
            if self._stage_index == len(self._stages):
                self.state = RUNNING
                names = ", ".join(part.name for part in self._parts)
                return actions + [Say(f"the site is up ({names}); Ctrl-C or SIGTERM stops it")]
            stage = [part for part in self._parts if part.stage == self._stages[self._stage_index]]
            actions += [Start(part) for part in stage]
            # A part that reports nothing is taken as up once started.
            self._waiting = {part.name for part in stage if part.ready_when is not None}
            self._deadline = now + self._timeout
        return actions

    def _stop(self, status: int, say: Say) -> list[Action]:
        self.state = STOPPING
        return [say, StopAll(status)]

    def _exit_message(self, event: Exited) -> str:
        how = f"was killed by signal {-event.status}" if event.status < 0 else f"exited with status {event.status}"
        when = "while the site was starting" if self.state == STARTING else "while the site was running"
        text = f"{event.part} {how} {when}"
        if event.last_lines:
            text += "; its last lines:\n" + "\n".join(f"    {line}" for line in event.last_lines)
        return text
