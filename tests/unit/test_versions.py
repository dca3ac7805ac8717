"""Releases and protocol versions in the handshake (PROTOCOL.md, "Versions and rolling upgrades"): a scheduler
of another release and the same protocol version welcomes every peer and says its release; one of another
protocol version refuses them naming both sides, and the refused peer's words name its own too."""

from __future__ import annotations

import logging
import os

import capnp  # type: ignore[import-untyped]
import pytest

from scaler.client.connection_refusal import RefusalKind, refusal_error
from scaler.errors import ConnectionFailedError, SchedulerLostError
from scaler.protocol import messages as m
from scaler.protocol.versions import INSTALLED, Speaks
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.scheduler_core import SchedulerCore

NEWER = Speaks("scaler 9.1.0", m.PROTOCOL_VERSION, m.PROTOCOL_REVISION + 3)
OTHER_PROTOCOL = Speaks("scaler 10.0.0", m.PROTOCOL_VERSION + 1, 0)
ADDRESS = "tcp://127.0.0.1:1"
# The schema itself, not the codec: the frames below are built as an older peer's pycapnp would build them.
SCHEMA = capnp.load(os.path.join(os.path.dirname(m.__file__), "scaler.capnp"))


def answer(core: SchedulerCore, hello: m.Hello) -> m.Message:
    (identity, message), = core.on_message(b"peer", hello, 0.0)
    assert identity == b"peer"
    return message


@pytest.mark.parametrize("role", [m.Role.CLIENT, m.Role.WORKER, m.Role.STORE])
def test_a_newer_release_of_the_same_protocol_welcomes_the_older_ones_and_says_its_release(role: m.Role) -> None:
    core = SchedulerCore(CoreConfig(speaks=NEWER))
    older = m.Hello(
        role=role, capacity=2, data_address="tcp://127.0.0.1:2", release="scaler 0.0.1", protocol_revision=0
    )
    welcome = answer(core, older)
    assert isinstance(welcome, m.Welcome)
    assert (welcome.release, welcome.protocol_version, welcome.protocol_revision) == (
        "scaler 9.1.0", m.PROTOCOL_VERSION, m.PROTOCOL_REVISION + 3
    )


@pytest.mark.parametrize("role", [m.Role.CLIENT, m.Role.WORKER, m.Role.STORE])
def test_another_protocol_version_is_refused_naming_both_sides_in_the_reply_and_the_log(
    role: m.Role, caplog: pytest.LogCaptureFixture
) -> None:
    core = SchedulerCore(CoreConfig(speaks=OTHER_PROTOCOL))
    with caplog.at_level(logging.WARNING):
        refused = answer(core, m.Hello(role=role, name="old-one", capacity=2, data_address="tcp://127.0.0.1:2"))
    expected = (
        f"protocol version {m.PROTOCOL_VERSION} not supported: the peer is {m.RELEASE}, protocol version "
        f"{m.PROTOCOL_VERSION}, the scheduler is scaler 10.0.0, protocol version {m.PROTOCOL_VERSION + 1}"
    )
    assert refused == m.Refused(reason=expected)  # final: not unknownPeer
    assert core.client_count == 0 and core.worker_count == 0
    assert f"refused {role.name.lower()} old-one of ?: {expected}" in caplog.text


def test_a_peer_from_before_releases_were_sent_is_named_as_such() -> None:
    core = SchedulerCore(CoreConfig(speaks=OTHER_PROTOCOL))
    refused = answer(core, m.Hello(role=m.Role.WORKER, capacity=1, release="", protocol_revision=0))
    assert isinstance(refused, m.Refused)
    assert f"the peer is an older release, protocol version {m.PROTOCOL_VERSION}," in refused.reason


def test_a_hello_and_welcome_from_before_the_fields_read_as_no_release_and_revision_zero() -> None:
    """What an older peer sends: only the fields it knew. Its frame must decode, and say nothing of a release."""
    for member, fields in (("hello", {"protocolVersion": 1, "role": "worker", "capacity": 3}),
                           ("welcome", {"protocolVersion": 1, "idPrefix": 7})):
        message = SCHEMA.Message.new_message()
        message.init(member)
        for name, value in fields.items():
            setattr(getattr(message, member), name, value)
        decoded = m.decode([message.to_bytes()])
        assert (decoded.release, decoded.protocol_revision, decoded.protocol_version) == ("", 0, 1)


def test_release_and_revision_travel_in_hello_and_welcome() -> None:
    hello = m.Hello(role=m.Role.CLIENT, release="scaler 3.2.1", protocol_revision=5)
    welcome = m.Welcome(id_prefix=4, release="scaler 3.2.2", protocol_revision=6)
    assert m.decode(m.encode(hello)) == hello and m.decode(m.encode(welcome)) == welcome
    assert m.Hello(role=m.Role.WORKER).release == INSTALLED.release


def test_a_client_refused_for_its_version_is_told_both_sides() -> None:
    reason = "protocol version 1 not supported: the peer is scaler 0.1.0, protocol version 1, the scheduler is ..."
    first = refusal_error(RefusalKind.PROTOCOL_VERSION, reason, ADDRESS, welcomed=False)
    assert type(first) is ConnectionFailedError
    assert f"(client of {INSTALLED}; scheduler at {ADDRESS}): {reason}" in str(first)
    # A scheduler restarted as a release of another protocol version cannot take the client back.
    later = refusal_error(RefusalKind.PROTOCOL_VERSION, reason, ADDRESS, welcomed=True)
    assert isinstance(later, SchedulerLostError) and "another protocol version" in str(later)
    assert reason in str(later)

