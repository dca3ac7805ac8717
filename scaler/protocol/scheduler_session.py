"""Whether the scheduler knows this peer, and what it has not acknowledged: how a worker outlives a scheduler.

A pure state machine of the protocol (§21), shared by the worker agent and the store's control link.

A scheduler that restarts does not know the worker any more: it answers whatever the worker sends with
`refused` (unknownPeer). The worker keeps running its tasks and says hello again, with a backoff while no
welcome comes; once welcomed it sends what it held back meanwhile, then re-announces the tasks it holds
(PROTOCOL.md §21). It gives up only at the death timeout, as when no scheduler answers at all.

Which results did the scheduler before get? The protocol has no acknowledgement of results, but one
connection delivers in order, and the scheduler echoes every heartbeat after it handled everything that
came before it: so a heartbeat's echo acknowledges the results sent before that heartbeat. Those sent
since the last echoed heartbeat may have died with the scheduler: they are kept (by reference: no copy,
and one list append per results message) and sent again to the next one, where a result of a task it
does not know waits for its client's re-submission (an orphan result). A heartbeat dropped on the way
leaves its results unacknowledged until a later echo: the worker then re-sends more than it must, which
the scheduler tolerates, and never less.
"""

from __future__ import annotations

import collections
import enum
import logging

from scaler.protocol import messages as m
from scaler.protocol.versions import Speaks

logger = logging.getLogger(__name__)

# The backoff of hellos while no welcome comes: doubling from the first to the last.
FIRST_HELLO_RETRY_SECONDS = 0.1
LAST_HELLO_RETRY_SECONDS = 2.0
# Messages kept for the next scheduler, at most: beyond, the oldest go (their tasks run again on re-submission).
MAX_KEPT_MESSAGES = 100_000
# Bytes of results kept until a heartbeat's echo acknowledges them, at most: a worker returning large inline
# results fast would otherwise keep a heartbeat interval's worth or more; beyond, the oldest are let go.
MAX_UNACKNOWLEDGED_BYTES = 64 * 1024 * 1024

Frames = list[m.Buffer]
# In the protocolError a scheduler answers a hello from a peer it has registered (PROTOCOL.md §3).
HELLO_TWICE = "hello sent twice"


class SessionState(enum.Enum):
    CONNECTING = "connecting"  # the first hello is out, no welcome yet
    WELCOMED = "welcomed"
    REJOINING = "rejoining"  # the scheduler said it does not know us: hello again, hold everything else


class SchedulerSession:
    def __init__(self) -> None:
        self.state = SessionState.CONNECTING
        # Results sent since the last heartbeat, and those sent before each heartbeat whose echo has not come.
        self._since_heartbeat: list[Frames] = []
        self._before_heartbeats: collections.deque[list[Frames]] = collections.deque()
        # The bytes of each of those generations (the last one: since the last heartbeat), and their total.
        self._generation_bytes: collections.deque[int] = collections.deque([0])
        self._unacknowledged_bytes = 0
        # While rejoining: what goes to the scheduler once it welcomes us, in order.
        self.held: list[Frames] = []
        self._retry_seconds = FIRST_HELLO_RETRY_SECONDS
        self._next_hello = 0.0
        self._left_registration = False  # since the last lost(): see still_registered

    @property
    def rejoining(self) -> bool:
        return self.state is SessionState.REJOINING

    def sent_results(self, frames: Frames) -> None:
        self._since_heartbeat.append(frames)
        size = sum(map(len, frames))
        self._generation_bytes[-1] += size
        self._unacknowledged_bytes += size
        if self._unacknowledged_bytes > MAX_UNACKNOWLEDGED_BYTES and self._before_heartbeats:
            self._drop_oldest()

    def heartbeat_sent(self) -> None:
        self._before_heartbeats.append(self._since_heartbeat)
        self._since_heartbeat = []
        self._generation_bytes.append(0)

    def echoed(self) -> None:
        if self._before_heartbeats:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        self._before_heartbeats.popleft()
        self._unacknowledged_bytes -= self._generation_bytes.popleft()

    def unacknowledged(self) -> int:
        return len(self._since_heartbeat) + sum(map(len, self._before_heartbeats))

    def lost(
        self, now: float, who: str, address: str, keeping: str = "tasks keep running",
        why: str = "does not know us (it restarted?)",
    ) -> bool:
        """The scheduler does not know us (or we moved to another: `why`): what it may not have got is held for
        the next, with what comes now. Returns whether to say hello now: not if we did already (this answers
        what we sent before that hello)."""
        if self.rejoining:
            return False
        logger.warning(
            f"{who}: the scheduler at {address} {why}; saying hello again, {keeping}"
            + (f", {self.unacknowledged()} results messages kept for it" if self.unacknowledged() else "")
        )
        self.state = SessionState.REJOINING
        self._left_registration = False
        for generation in self._before_heartbeats:
            self.held.extend(generation)
        self.held.extend(self._since_heartbeat)
        self._before_heartbeats.clear()
        self._since_heartbeat = []
        self._generation_bytes = collections.deque([0])
        self._unacknowledged_bytes = 0
        self._trim()
        self._retry_seconds = FIRST_HELLO_RETRY_SECONDS
        self._next_hello = now + self._retry_seconds
        return True

    def still_registered(self, reason: str) -> bool:
        """While rejoining, a protocolError saying our hello was sent twice: the scheduler still has us from before
        we moved away (to a standby scheduler and back) and never dropped us, so it would refuse every hello. The
        peer leaves it (`disconnect`) and says hello again, once per rejoin: True then. (A hello repeated while
        its welcome was on the way is answered after that welcome: the peer is no longer rejoining.)"""
        if not self.rejoining or HELLO_TWICE not in reason or self._left_registration:
            return False
        self._left_registration = True
        return True

    def hold(self, frames: Frames) -> None:
        self.held.append(frames)
        self._trim()

    def _trim(self) -> None:
        if len(self.held) > MAX_KEPT_MESSAGES:
            del self.held[: len(self.held) - MAX_KEPT_MESSAGES]

    def hello_due(self, now: float) -> bool:
        """While rejoining: whether to say hello again now (no welcome came); the wait doubles each time."""
        if not self.rejoining or now < self._next_hello:
            return False
        self._retry_seconds = min(self._retry_seconds * 2, LAST_HELLO_RETRY_SECONDS)
        self._next_hello = now + self._retry_seconds
        return True

    def welcomed(self, task_ids: list[int] | None, who: str, welcome: m.Welcome | None = None) -> list[Frames]:
        """Welcomed, holding these tasks (None: a store, which holds none): what to send now, in order. After a
        rejoin, what was held back, then the re-announcement of the tasks: the scheduler gives a rejoining
        worker work only once it re-announced, so it has the results the worker made before it hands out
        tasks (re-submitted ones among them) that those results complete; else nothing."""
        rejoined = self.rejoining
        self.state = SessionState.WELCOMED
        # Which release welcomed us: after an upgrade, the log shows the new scheduler took the peer back.
        scheduler = f" (scheduler: {_speaks(welcome)})" if welcome is not None else ""
        if task_ids is None:
            if rejoined:
                logger.info(f"{who}: welcomed again; announcing every object it holds{scheduler}")
            return []
        if not rejoined:
            logger.info(f"{who}: connected to the scheduler" + (f" ({_speaks(welcome)})" if welcome else ""))
            return []
        held, self.held = self.held, []
        logger.info(
            f"{who}: welcomed again; re-announced {len(task_ids)} tasks held, sent {len(held)} messages held before"
            + scheduler
        )
        return [*held, m.encode(m.Reannounce(task_ids=task_ids))]


def _speaks(welcome: m.Welcome) -> Speaks:
    return Speaks(welcome.release, welcome.protocol_version, welcome.protocol_revision)
