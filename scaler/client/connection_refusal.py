"""What a refusal means to the client: which kind it is, and what the caller is told.

The scheduler says why in `refused{reason}` (PROTOCOL.md §4): a protocol version it does not speak, a peer it
does not know (never welcomed, dropped for silence, or a restarted scheduler), or a rule of its own. A CURVE
handshake the scheduler rejects never reaches it as a message at all: the I/O shell detects it on the socket
and reports it to the core as an authentication refusal (`ClientConnectionCore.on_refused`).

A refusal in the middle of a running session (after the welcome) means the scheduler lost us: today that
fails everything outstanding; reconnecting and re-submitting (issue 26) changes that decision in the core.
A shutdown refused in protected mode is not a refusal of the link: it is the answer to that request
(`shutdownResponse{accepted: false}`), raised by `Client.shutdown` as ProtectedModeError.
"""

from __future__ import annotations

import enum

from scaler.errors import ConnectionFailedError, SchedulerLostError
from scaler.protocol.versions import refused_by_scheduler


class RefusalKind(enum.Enum):
    PROTOCOL_VERSION = "protocol version"
    UNKNOWN_PEER = "unknown peer"
    AUTHENTICATION = "authentication"  # reported by the shell, never by a message
    OTHER = "other"


def refusal_kind(reason: str) -> RefusalKind:
    """The kind of a `refused{reason}`, from the reason texts PROTOCOL.md §3 lists."""
    if reason.startswith("protocol version"):
        return RefusalKind.PROTOCOL_VERSION
    if reason.startswith("unknown peer"):
        return RefusalKind.UNKNOWN_PEER
    return RefusalKind.OTHER


def refusal_error(kind: RefusalKind, reason: str, address: str, welcomed: bool) -> ConnectionFailedError:
    """What every waiting caller gets for this refusal."""
    if kind is RefusalKind.AUTHENTICATION:
        return ConnectionFailedError(
            f"the scheduler at {address} rejected this client's CURVE keys; its handshake says: {reason}"
        )
    if kind is RefusalKind.PROTOCOL_VERSION:
        # Both sides' versions: the scheduler's reason names them, and ours is added for an older scheduler's.
        refused = refused_by_scheduler("client", address, reason)
        if welcomed:
            return SchedulerLostError(
                f"{refused}; the scheduler restarted as a release of another protocol version, which cannot take "
                "this client back: start one of this client's protocol version there"
            )
        return ConnectionFailedError(f"{refused}; use a client of the scheduler's protocol version")
    if welcomed:
        return SchedulerLostError(
            f"the scheduler at {address} no longer knows this client (restarted, or dropped it after "
            f"--client-timeout-seconds of silence): {reason}"
        )
    return ConnectionFailedError(f"the scheduler at {address} refused this client: {reason}")
