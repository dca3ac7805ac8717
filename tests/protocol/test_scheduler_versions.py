"""Scheduler conformance: releases and protocol versions in the handshake (PROTOCOL.md §4 and "Versions and
rolling upgrades"). The tests play clients and workers from DEALER sockets, each its own, against one scheduler
they share (scheduler_shared_by_the_module): none is given work, and each test reads only its own peers' answers
(and the scheduler's log for a reason only its peer was given)."""

from __future__ import annotations

import os
from typing import Callable

from scaler.protocol.versions import PROTOCOL_REVISION
from tests.protocol import wire
from tests.protocol.conftest import SchedulerUnderTest
from tests.protocol.peers import scheduler_is_own
from tests.protocol.played_peer import PlayedPeer

StartScheduler = Callable[..., SchedulerUnderTest]
NEWER_RELEASE = "scaler 99.0.0"


def hello(peer: PlayedPeer, role: str, **fields: object) -> wire.Received:
    values: dict[str, object] = dict(protocolVersion=wire.PROTOCOL_VERSION, role=role, name=f"played {role}",
                                     hostname="test", pid=os.getpid(), capacity=4 if role == "worker" else 0)
    values.update(fields)
    peer.send("hello", **values)
    return peer.receive()


def test_the_welcome_names_the_schedulers_release_and_revision(scheduler_shared_by_the_module: StartScheduler) -> None:
    welcome = scheduler_shared_by_the_module().peer("client").register("client")
    assert welcome.get("protocolVersion") == wire.PROTOCOL_VERSION
    assert welcome.get("release", "").strip() and welcome.get("protocolRevision", 0) >= 1
    if scheduler_is_own():  # this repository's scheduler implements every revision of this checkout
        assert welcome.get("protocolRevision") == PROTOCOL_REVISION, welcome.fields


def test_peers_of_the_same_protocol_version_are_welcomed_whatever_their_release_and_revision(
    scheduler_shared_by_the_module: StartScheduler,
) -> None:
    """A newer release (a higher revision), and one from before releases were sent (neither field)."""
    scheduler = scheduler_shared_by_the_module()
    for role in ("client", "worker"):
        newer = hello(scheduler.peer(f"newer-{role}"), role, release=NEWER_RELEASE, protocolRevision=99)
        older = hello(scheduler.peer(f"older-{role}"), role)
        assert (newer.member, older.member) == ("welcome", "welcome"), (newer.fields, older.fields)


def test_another_protocol_version_is_refused_naming_both_versions_and_releases(
    scheduler_shared_by_the_module: StartScheduler,
) -> None:
    """§4: final (not unknownPeer), not registered, and the reason says which versions met: the peer's (its
    release as its hello named it) and the scheduler's (as its welcome names it). The scheduler logs it."""
    scheduler = scheduler_shared_by_the_module()
    ours = scheduler.peer("client").register("client").get("release")
    for role in ("client", "worker"):
        peer = scheduler.peer(f"v2-{role}")
        refused = hello(peer, role, protocolVersion=wire.PROTOCOL_VERSION + 1, release=NEWER_RELEASE)
        assert refused.member == "refused" and not refused.get("unknownPeer", False)
        reason = refused.get("reason", "")
        assert reason.startswith(f"protocol version {wire.PROTOCOL_VERSION + 1}"), reason
        for named in (NEWER_RELEASE, ours, f"protocol version {wire.PROTOCOL_VERSION}"):
            assert named in reason, (named, reason)
        peer.assert_unknown()
        assert reason in scheduler.process.log()
