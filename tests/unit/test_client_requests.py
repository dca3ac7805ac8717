"""The client's requests that wait for an answer (clear, drain_workers, shutdown): answers carry no request
id, so the connection keeps one request of a kind in flight, and an answer that comes after its request
timed out is dropped instead of being taken by the next request of that kind.

No socket here: the answers are handed to the connection as its I/O thread would hand them."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest

from scaler.client.connection import ClientConnection
from scaler.errors import ConnectionFailedError
from scaler.protocol import messages as m

_WAIT_SECONDS = 30.0  # only an upper bound against a hang


@pytest.fixture
def connection() -> Iterator[ClientConnection]:
    made = ClientConnection("tcp://127.0.0.1:1", "test", timeout_seconds=30, heartbeat_interval_seconds=1)
    yield made
    made._wakeup.close()


def wait_until_waiting(connection: ClientConnection, reply_type: type) -> None:
    deadline = time.monotonic() + _WAIT_SECONDS
    while not connection._requests.is_waiting(reply_type):
        assert time.monotonic() < deadline, "the request never started waiting"
        time.sleep(0.001)


def test_an_answer_after_its_request_timed_out_is_not_taken_by_the_next_request(
    connection: ClientConnection,
) -> None:
    with pytest.raises(ConnectionFailedError, match="no ClearResponse from the scheduler within"):
        connection.request(m.ClearRequest(), m.ClearResponse, timeout=0.01)

    answers: list[m.Message] = []
    second = threading.Thread(
        target=lambda: answers.append(connection.request(m.ClearRequest(), m.ClearResponse, _WAIT_SECONDS))
    )
    second.start()
    wait_until_waiting(connection, m.ClearResponse)
    connection._on_message(m.ClearResponse(canceled_tasks=1))  # the late answer to the first request
    connection._on_message(m.ClearResponse(canceled_tasks=2))
    second.join(timeout=_WAIT_SECONDS)
    assert not second.is_alive()
    assert answers == [m.ClearResponse(canceled_tasks=2)]


def test_a_second_request_of_a_kind_waits_until_the_first_has_its_answer(connection: ClientConnection) -> None:
    answers: dict[str, m.Message] = {}

    def ask(name: str) -> None:
        answers[name] = connection.request(m.DrainWorkers(worker_names=[name]), m.DrainWorkersResponse, _WAIT_SECONDS)

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    wait_until_waiting(connection, m.DrainWorkersResponse)
    second = threading.Thread(target=ask, args=("second",))
    second.start()
    second.join(timeout=0.2)
    assert second.is_alive() and not connection._outbox.count(m.DrainWorkers(worker_names=["second"]))

    connection._on_message(m.DrainWorkersResponse(unknown=["first"]))
    first.join(timeout=_WAIT_SECONDS)
    wait_until_waiting(connection, m.DrainWorkersResponse)
    connection._on_message(m.DrainWorkersResponse(unknown=["second"]))
    second.join(timeout=_WAIT_SECONDS)
    assert answers == {
        "first": m.DrainWorkersResponse(unknown=["first"]), "second": m.DrainWorkersResponse(unknown=["second"])
    }
