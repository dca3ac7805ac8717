"""Scheduler conformance: a client's share in its hello (PROTOCOL.md §4), checked before it is registered."""

from __future__ import annotations

import os
from typing import Callable

from tests.protocol.conftest import SchedulerUnderTest

StartScheduler = Callable[..., SchedulerUnderTest]


def _hello_with_share(share: float) -> dict:
    return dict(protocolVersion=1, role="client", name="weighted", hostname="test", pid=os.getpid(), share=share)


def test_a_client_share_is_checked_before_the_client_is_registered(scheduler_under_test: StartScheduler) -> None:
    """A finite share above 0 is welcomed; 0, a negative, an infinite or a NaN share is refused with the rule."""
    scheduler = scheduler_under_test()
    weighted = scheduler.peer("share-2")
    weighted.send("hello", **_hello_with_share(2.0))
    weighted.expect("welcome")
    weighted.assert_registered()
    for share in (0.0, -1.0, float("inf"), float("nan")):
        peer = scheduler.peer(f"share-{share}")
        peer.send("hello", **_hello_with_share(share))
        refused = peer.expect("refused")
        assert "share must be a finite number above 0" in refused.get("reason", ""), share
        peer.assert_unknown()
