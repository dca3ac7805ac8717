"""The loop of the owner of a ZMTP endpoint (scaler/utility/zmtp_router.py, zmtp_dealer.py), reduced to what the
tests of either need: wait on its descriptor, take what it received, and tick it at its owner's interval."""

from __future__ import annotations

import select
import time
from typing import Callable, Protocol, Sequence


class Endpoint(Protocol):
    def fileno(self) -> int: ...
    def receive(self, now: float) -> Sequence[Sequence[bytes | memoryview]]: ...
    def tick(self, now: float) -> object: ...


class Pump:
    def __init__(self, endpoint: Endpoint, tick_seconds: float) -> None:
        self.endpoint = endpoint
        self.received: list[list[bytes]] = []
        self.next_tick = 0.0
        self._tick_seconds = tick_seconds

    def until(self, done: Callable[[], bool], seconds: float = 10.0) -> None:
        deadline = time.monotonic() + seconds
        while not done():
            assert time.monotonic() < deadline, "timed out"
            select.select([self.endpoint.fileno()], [], [], 0.02)
            now = time.monotonic()
            self.received += [[bytes(frame) for frame in frames] for frames in self.endpoint.receive(now)]
            if now >= self.next_tick:
                self.next_tick = now + self._tick_seconds
                self.endpoint.tick(now)
            self.after_pass()

    def after_pass(self) -> None:
        """What the owner does at the end of each pass, besides the above (nothing by default)."""

    def next_message(self) -> list[bytes]:
        self.until(lambda: bool(self.received))
        return self.received.pop(0)

    def run_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        self.until(lambda: time.monotonic() >= end, seconds + 5)
