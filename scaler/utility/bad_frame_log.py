"""What a server (the scheduler, a store) says about the frames it drops: one line per sender per interval.

Random bytes written at the scheduler's port (a port scanner, a program pointed at the wrong port)
read as a stream of undecodable messages, about one per 250 bytes, and a broken peer repeats its
mistake as fast as it can send. The first drop from a sender is logged with the reason; the next
ones, until the interval is over, are only counted, and one line then says how many there were.
Pure: the caller passes the time and logs the lines it gets back.
"""

from __future__ import annotations

import dataclasses

INTERVAL_SECONDS = 10.0

# Senders followed at once. Each raw connection has its own identity, so a flood of connections
# would otherwise grow the table without bound; beyond this, drops are counted together.
MAX_SENDERS = 1000

_TEXT_IDENTITY_CHARACTERS = 40
_HEX_IDENTITY_BYTES = 8


def short_identity(identity: bytes) -> str:
    """A routing identity as a log can show it: printable text as it is, anything else as leading hex bytes.

    Scaler's peers name themselves in text (`C|host|pid|id`); ZeroMQ gives anonymous peers 5 binary bytes,
    and a peer that speaks no ZMTP may send hundreds of random ones.
    """
    if identity and all(0x20 <= byte < 0x7F for byte in identity):
        text = identity.decode("ascii")
        if len(text) <= _TEXT_IDENTITY_CHARACTERS:
            return text
        return f"{text[:_TEXT_IDENTITY_CHARACTERS]}... ({len(identity)} bytes)"
    if not identity:
        return "(no identity)"
    shown = identity[:_HEX_IDENTITY_BYTES].hex()
    if len(identity) <= _HEX_IDENTITY_BYTES:
        return f"0x{shown}"
    return f"0x{shown}... ({len(identity)} bytes)"


@dataclasses.dataclass
class _Window:
    opened_at: float
    dropped_since: int = 0


class BadFrameLog:
    """Decides which drops of bad frames are logged; `on_dropped` per frame, `on_tick` now and then."""

    def __init__(self, interval_seconds: float = INTERVAL_SECONDS, max_senders: int = MAX_SENDERS) -> None:
        self._interval = interval_seconds
        self._max_senders = max_senders
        self._windows: dict[bytes, _Window] = {}
        self._untracked_dropped = 0
        self._untracked_since: float | None = None

    def on_dropped(self, sender: bytes, what: str, now: float) -> list[str]:
        """The lines to log for one dropped frame; `what` says what was dropped and why."""
        window = self._windows.get(sender)
        if window is not None and now - window.opened_at < self._interval:
            window.dropped_since += 1
            return []
        lines: list[str] = []
        if window is not None:
            lines.extend(self._summary(sender, window))
        elif len(self._windows) >= self._max_senders:
            if self._untracked_since is None:
                self._untracked_since = now
            self._untracked_dropped += 1
            return []
        self._windows[sender] = _Window(opened_at=now)
        lines.append(
            f"Scheduler: dropped {what} from {short_identity(sender)}; "
            f"more from it in the next {self._interval:g}s are counted, not logged"
        )
        return lines

    def on_tick(self, now: float) -> list[str]:
        """Close the intervals that are over: a line for each sender that sent more meanwhile."""
        lines: list[str] = []
        for sender, window in list(self._windows.items()):
            if now - window.opened_at >= self._interval:
                del self._windows[sender]
                lines.extend(self._summary(sender, window))
        if self._untracked_since is not None and now - self._untracked_since >= self._interval:
            lines.append(
                f"Scheduler: dropped {self._untracked_dropped:,} more bad frame(s) from other senders "
                f"(over {self._max_senders:,} senders sent bad frames in {self._interval:g}s)"
            )
            self._untracked_dropped = 0
            self._untracked_since = None
        return lines

    def _summary(self, sender: bytes, window: _Window) -> list[str]:
        if not window.dropped_since:
            return []
        return [
            f"Scheduler: dropped {window.dropped_since:,} more bad frame(s) from {short_identity(sender)} "
            f"in the {self._interval:g}s after the first"
        ]
