"""Fixtures of the conformance suite: the implementations under test, the scheduler a test plays, and
worker processes that are always stopped (their logs are printed, and shown when a test fails)."""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import Callable, Iterator

import pytest
import zmq

from tests.native_worker import BUILD_TIMEOUT_SECONDS
from tests.protocol.dialects import DIALECTS, Dialect
from tests.protocol.fake_scheduler import FakeScheduler, WorkerLink
from tests.protocol.peers import (
    PeerProcess,
    WorkerImplementation,
    start_scheduler,
    start_worker,
    worker_implementations,
)
from tests.protocol.played_peer import PlayedPeer

IMPLEMENTATIONS = worker_implementations()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "role_table: which role may send which message (PROTOCOL.md §3), and the protocolError for the others",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The first test that needs the native worker may build it: give that one test the build's time too (its
    worker is the `implementation` fixture's, or a module's shared one, worker_shared_by_the_module)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        if any(getattr(params.get(name), "name", "") == "native"
               for name in ("implementation", "worker_shared_by_the_module")):
            default = float(config.getini("timeout") or 0)
            item.add_marker(pytest.mark.timeout(default + BUILD_TIMEOUT_SECONDS))
            return


@pytest.fixture(params=IMPLEMENTATIONS, ids=[implementation.name for implementation in IMPLEMENTATIONS])
def implementation(request: pytest.FixtureRequest) -> WorkerImplementation:
    return request.param


@pytest.fixture
def dialect(implementation: WorkerImplementation) -> Dialect:
    return DIALECTS[implementation.dialect]


def played_scheduler() -> Iterator[FakeScheduler]:
    """A scheduler the test plays, closed with its own context afterwards (a fixture's body: `yield from`)."""
    context = zmq.Context()
    played = FakeScheduler(context)
    try:
        yield played
    finally:
        played.close()
        context.term()


@pytest.fixture
def scheduler() -> Iterator[FakeScheduler]:
    yield from played_scheduler()


StartWorker = Callable[..., PeerProcess]


@pytest.fixture
def start(implementation: WorkerImplementation, scheduler: FakeScheduler, tmp_path: str) -> Iterator[StartWorker]:
    """start(**options) starts a worker of the implementation under test, pointed at the played scheduler."""
    started: list[PeerProcess] = []

    def make(address: str | None = None, **options: object) -> PeerProcess:
        log_path = os.path.join(str(tmp_path), f"worker-{len(started)}.log")
        process = start_worker(implementation, address or scheduler.address, log_path, **options)  # type: ignore[arg-type]
        started.append(process)
        return process

    try:
        yield make
    finally:
        for process in started:
            process.stop()
            print(f"---- log of worker process {process.process.pid} ({implementation.name}) ----\n{process.log()}")


@dataclasses.dataclass
class Worker:
    link: WorkerLink
    process: PeerProcess


@pytest.fixture
def worker(start: StartWorker, scheduler: FakeScheduler) -> Worker:
    """A welcomed worker with capacity 100 and default limits; heartbeats every 0.2 s, as the welcome asks."""
    process = start(capacity=100)
    link = scheduler.accept()
    link.welcome(heartbeatIntervalMs=200)
    return Worker(link, process)


@dataclasses.dataclass
class SharedWorker:
    worker: Worker
    dialect: Dialect


@pytest.fixture(scope="module", params=IMPLEMENTATIONS, ids=[implementation.name for implementation in IMPLEMENTATIONS])
def worker_shared_by_the_module(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SharedWorker]:
    """The `worker` above, one of each implementation for all the tests of a module that leave it as they found
    it: registered, serving, nothing of theirs still on its way (each ends with every answer it caused read).
    One worker's start instead of one per test; its log is printed when the module ends."""
    implementation: WorkerImplementation = request.param
    directory = str(tmp_path_factory.mktemp(f"shared-worker-{implementation.name}"))
    schedulers = played_scheduler()
    scheduler = next(schedulers)
    process = start_worker(implementation, scheduler.address, os.path.join(directory, "worker.log"), capacity=100)
    try:
        link = scheduler.accept()
        link.welcome(heartbeatIntervalMs=200)
        yield SharedWorker(Worker(link, process), DIALECTS[implementation.dialect])
    finally:
        try:
            process.stop()
            print(f"---- log of worker process {process.process.pid} ({implementation.name}) ----\n{process.log()}")
        finally:
            schedulers.close()


# ---------------------------------------------------------------------------------------------- scheduler part


def free_tcp_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


@dataclasses.dataclass
class SchedulerUnderTest:
    address: str
    process: PeerProcess
    peer: Callable[[str], PlayedPeer]  # peer(tag): a new DEALER connected to it, closed after the test


@pytest.fixture
def scheduler_under_test(tmp_path: str) -> Iterator[Callable[..., SchedulerUnderTest]]:
    """start(*options): the scheduler under test on a free port, answering a hello; stopped after the test."""
    yield from schedulers_under_test(str(tmp_path))


@pytest.fixture(scope="module")
def scheduler_shared_by_the_module(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[], SchedulerUnderTest]]:
    """One scheduler under test (default options) for the tests of a module that each play peers of their own
    and leave nothing the next test reads: every peer has an identity of its own, so what a test registers, or
    has dropped, is no other test's. One scheduler's start instead of one per test; its log is printed when
    the module ends."""
    starts = schedulers_under_test(str(tmp_path_factory.mktemp("shared-scheduler")))
    shared = next(starts)()
    try:
        yield lambda: shared
    finally:
        starts.close()  # its `finally`: the peers closed, the scheduler stopped, its log printed


def schedulers_under_test(directory: str) -> Iterator[Callable[..., SchedulerUnderTest]]:
    """The body of the fixtures above: yields start(*options); stops what it started when closed."""
    context = zmq.Context()
    played: list[PlayedPeer] = []
    started: list[PeerProcess] = []

    def peer(tag: str, address: str) -> PlayedPeer:
        made = PlayedPeer(context, address, tag)
        played.append(made)
        return made

    def start(*options: str) -> SchedulerUnderTest:
        address = free_tcp_address()
        log_path = os.path.join(directory, f"scheduler-{len(started)}.log")
        process = start_scheduler(address, log_path, "--logging-level", "INFO", *options)
        started.append(process)
        probe = peer("probe", address)
        welcome = probe.hello()  # the DEALER delivers it once the scheduler listens
        assert welcome.member == "welcome", f"the scheduler did not welcome a client: {welcome.fields}\n{process.log()}"
        probe.send("disconnect", reason="probe done")
        return SchedulerUnderTest(address, process, lambda tag: peer(tag, address))

    try:
        yield start
    finally:
        for made in played:
            made.close()
        for process in started:
            process.stop()
            print(f"---- log of scheduler process {process.process.pid} ----\n{process.log()}")
        context.term()
