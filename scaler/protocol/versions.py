"""Which release and which protocol a peer speaks: what a hello and a welcome say of their sender, the one rule
that decides whether two peers can work together, and the words a refusal uses (PROTOCOL.md, "Versions and
rolling upgrades").

The protocol version is a major number: peers of one version work together whatever their releases, so a
scheduler of a newer release takes over a running cluster through the restart path (§21). A change a peer
of the same version could misread bumps it. Anything else added to a version is a revision: new fields
whose absent value means the old behaviour, new messages sent only to a peer whose revision has them. The
release ("scaler 2.1.0") is for people: logs, the monitor, the refusal message; no decision reads it.
"""

from __future__ import annotations

import dataclasses

from scaler.about import __version__

PROTOCOL_VERSION = 1
# Revisions of protocol version 1; a peer from before revisions were counted sends none, read as 0.
#   1: hello and welcome carry the sender's release and revision.
#   2: TaskGroup.keepInStores (kept results that stay in stores whatever their size).
#   3: TaskGroup.ahead (the tasks of a client far below its share run before the top-level tasks a worker holds).
#   4: HeartbeatEcho.heartbeatIntervalMs (a scheduler with many workers spaces their heartbeats out).
PROTOCOL_REVISION = 4
RELEASE = f"scaler {__version__}"

# What a refusal says of a peer whose hello names no release (one from before they were sent).
UNNAMED_RELEASE = "an older release"


@dataclasses.dataclass(frozen=True)
class Speaks:
    """A peer's release and protocol, as its hello or welcome says them."""

    release: str = RELEASE
    protocol_version: int = PROTOCOL_VERSION
    protocol_revision: int = PROTOCOL_REVISION

    def __str__(self) -> str:
        return f"{self.release or UNNAMED_RELEASE}, protocol version {self.protocol_version}"

    def in_full(self) -> str:
        """With the revision too: what `--version` prints (a refusal or a log line names only what decides)."""
        return f"{self}, revision {self.protocol_revision}"

    def works_with(self, other: Speaks) -> bool:
        return self.protocol_version == other.protocol_version


# This process: what every hello and welcome it sends says, unless a scheduler is configured to say otherwise.
INSTALLED = Speaks()


def mismatch_reason(peer: Speaks, scheduler: Speaks) -> str:
    """The `refused` reason for a peer of another protocol version: both sides, release and version. It starts
    with "protocol version", which is how the Python client tells this refusal from the others."""
    return (
        f"protocol version {peer.protocol_version} not supported: the peer is {peer}, "
        f"the scheduler is {scheduler}"
    )


def refused_by_scheduler(who: str, address: str, reason: str, own: Speaks = INSTALLED) -> str:
    """What a peer whose hello was refused logs or raises: the scheduler's reason and this peer's own versions,
    so that the line names both sides even when an older scheduler's reason names only its own."""
    return f"scheduler refused us ({who} of {own}; scheduler at {address}): {reason}"
