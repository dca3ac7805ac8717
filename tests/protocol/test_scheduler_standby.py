"""Scheduler conformance: standby schedulers (PROTOCOL.md, "Standby schedulers"). A standby refuses every
role with `refused{standby}` while the scheduler ranked before it serves, answers a probe so, and serves once
that one is gone; the serving one answers a stranger's probe `refused{unknownPeer}`."""

from __future__ import annotations

import os
from typing import Callable

import zmq

from tests.protocol.conftest import SchedulerUnderTest, free_tcp_address
from tests.protocol.peers import start_scheduler
from tests.protocol.played_peer import PlayedPeer

StartScheduler = Callable[..., SchedulerUnderTest]
LONGEST_WAIT_SECONDS = 60.0


def test_a_standby_refuses_every_role_while_the_first_serves_then_serves_once_it_is_gone(
    scheduler_under_test: StartScheduler, tmp_path,
) -> None:
    first = scheduler_under_test()
    probe = first.peer("probe")
    probe.send("heartbeat")  # how a standby asks: a serving scheduler does not know the prober
    refused = probe.expect("refused")
    assert refused.get("unknownPeer") and not refused.get("standby")

    address = free_tcp_address()
    standby = start_scheduler(address, os.path.join(str(tmp_path), "standby.log"), "--logging-level", "INFO",
                              "--standby-of", first.address, "--standby-takeover-seconds", "1")
    context = zmq.Context()
    peers = [PlayedPeer(context, address, role) for role in ("client", "worker", "heartbeat")]
    try:
        for peer, role in zip(peers[:2], ("client", "worker")):
            refused = peer.hello(role, capacity=1).get
            assert refused("standby") and first.address in refused("reason")
        peers[2].send("heartbeat")
        assert peers[2].expect("refused").get("standby")
        first.process.stop()
        # Gone: after the takeover time the standby welcomes whoever says hello.
        late = PlayedPeer(context, address, "late")
        peers.append(late)
        for _ in range(int(LONGEST_WAIT_SECONDS * 10)):
            answer = late.hello("worker", capacity=1)
            if answer.member == "welcome":
                break
            assert answer.get("standby"), answer.fields
            late.quiet_for(0.1)
        else:
            raise AssertionError(f"the standby never took over:\n{standby.log()}")
        late.assert_registered()
    finally:
        for peer in peers:
            peer.close()
        standby.stop()
        context.term()
