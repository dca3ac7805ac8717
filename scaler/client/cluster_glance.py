"""What a notebook shows of a cluster beyond one client: one look at the scheduler's monitor feed, and the UI.

The client's own link to the scheduler carries no count of workers, so a summary reads one snapshot of
the monitor feed, bounded in time: at the monitor address the scheduler derives from its own address
(or the one given), which is an ipc:// file on the scheduler's host. From another host, or with the feed
off, there is no file and the summary says the figures are unknown, without waiting at all.

The web view's address cannot be learned from the scheduler (scaler_ui reads the feed; the scheduler does
not know who watches), so whoever runs `scaler_ui` says where it is, in SCALER_UI_URL.
"""

from __future__ import annotations

import dataclasses
import os

import zmq

from scaler.protocol.monitor_feed import MonitorSubscriber
from scaler.protocol.monitor_messages import MonitorSnapshot
from scaler.utility.ipc_sockets import ipc_path

UI_URL_ENVIRONMENT_VARIABLE = "SCALER_UI_URL"
# A new subscriber gets a snapshot within a quarter of a second (the scheduler's tick); the bound is for a
# scheduler that is busy or gone, not the common case.
GLANCE_SECONDS = 1.5


@dataclasses.dataclass(frozen=True)
class ClusterGlance:
    workers: int
    queued: int
    running: int
    finished: int
    clients: int

    @classmethod
    def of(cls, snapshot: MonitorSnapshot) -> ClusterGlance:
        return cls(
            workers=len(snapshot.workers),
            queued=snapshot.tasks.unassigned,
            running=snapshot.tasks.running,
            finished=snapshot.tasks.finished,
            clients=len(snapshot.clients),
        )


def glance(monitor_address: str, timeout_seconds: float = GLANCE_SECONDS) -> ClusterGlance | None:
    """One snapshot of the feed at `monitor_address`, or None when none comes within the timeout (or there
    is no feed to read on this host: then at once)."""
    path = ipc_path(monitor_address)
    if path is not None and not os.path.exists(path):
        return None
    try:
        subscriber = MonitorSubscriber(monitor_address)
    except zmq.ZMQError:
        return None
    with subscriber:
        snapshot = subscriber.receive(timeout_seconds)
    return None if snapshot is None else ClusterGlance.of(snapshot)


def ui_url() -> str | None:
    """Where scaler_ui serves, if whoever runs it said so in SCALER_UI_URL."""
    url = os.environ.get(UI_URL_ENVIRONMENT_VARIABLE, "").strip()
    return url or None
