"""Worker conformance: releases and protocol versions in the handshake (PROTOCOL.md §4 and "Versions and rolling
upgrades"). Each test plays the scheduler on a ROUTER it binds and starts the worker under test as a process."""

from __future__ import annotations

from scaler.protocol.versions import PROTOCOL_REVISION
from tests.protocol import wire
from tests.protocol.conftest import StartWorker
from tests.protocol.dialects import Dialect
from tests.protocol.fake_scheduler import FakeScheduler
from tests.protocol.peers import OWN_IMPLEMENTATIONS, WorkerImplementation

EXIT_SECONDS = 30.0
OTHER_SCHEDULER = "scaler 99.0.0"


def test_hello_names_the_workers_release_and_protocol_revision(
    start: StartWorker, scheduler: FakeScheduler, implementation: WorkerImplementation
) -> None:
    """The workers of this repository implement every revision of this checkout, so they say its revision; another
    implementation says at least 1 (the revision that added the field)."""
    start()
    hello = scheduler.accept().hello
    assert hello.get("protocolVersion") == wire.PROTOCOL_VERSION
    assert hello.get("release", "").strip() and hello.get("protocolRevision", 0) >= 1, hello.fields
    if implementation.name in OWN_IMPLEMENTATIONS:
        assert hello.get("protocolRevision") == PROTOCOL_REVISION, hello.fields


def test_a_refusal_for_another_protocol_version_is_logged_naming_both_sides(
    start: StartWorker, scheduler: FakeScheduler
) -> None:
    """Status 1, and a log line with the scheduler's reason and the worker's own release (an older scheduler's
    reason names only its own versions)."""
    process = start()
    link = scheduler.accept()
    reason = (f"protocol version {wire.PROTOCOL_VERSION} not supported: the peer is {link.hello.get('release')}, "
              f"protocol version {wire.PROTOCOL_VERSION}, the scheduler is {OTHER_SCHEDULER}, protocol version 2")
    link.send("refused", reason=reason)
    assert process.wait_exit(EXIT_SECONDS) == 1
    log = process.log()
    assert reason in log, log
    own = log.replace(reason, "")  # its own release, said by the worker itself
    assert link.hello.get("release") in own and f"protocol version {wire.PROTOCOL_VERSION}" in own, log


def test_a_newer_release_of_the_same_protocol_version_is_worked_with(
    start: StartWorker, scheduler: FakeScheduler, dialect: Dialect
) -> None:
    """A welcome of a higher revision, from another release: the worker takes it as any other and runs tasks."""
    start()
    link = scheduler.accept()
    link.welcome(release=OTHER_SCHEDULER, protocolRevision=99)
    task_id, = link.submit(dialect, "add", [(2, 3)])
    assert link.outcomes(dialect, [task_id])[task_id].value == 5
