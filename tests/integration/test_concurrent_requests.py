"""Requests that wait for the scheduler's answer (drain_workers, clear), made from several threads of one
client at once with real processes: each thread gets its own answer, none waits for one another took."""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

import pytest

from scaler import Client, SchedulerClusterCombo

pytestmark = pytest.mark.timeout(120)

Answer = TypeVar("Answer")

_THREADS = 8
_ROUNDS = 5
# The client's timeout: a request whose answer went to another thread waits this long, then fails.
_CLIENT_TIMEOUT_SECONDS = 30
_JOIN_SECONDS = 90  # only an upper bound against a hang


def run_in_threads(call: Callable[[int], Answer]) -> tuple[dict[int, list[Answer]], list[BaseException]]:
    """`call(thread_index)` from `_THREADS` threads started together, `_ROUNDS` times each: what each got,
    and what was raised."""
    answers: dict[int, list[Answer]] = {index: [] for index in range(_THREADS)}
    errors: list[BaseException] = []
    start = threading.Barrier(_THREADS)

    def work(index: int) -> None:
        try:
            start.wait(timeout=_JOIN_SECONDS)
            for _ in range(_ROUNDS):
                answers[index].append(call(index))
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(index,), daemon=True) for index in range(_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=_JOIN_SECONDS)
    assert not any(thread.is_alive() for thread in threads), "a request never returned"
    return answers, errors


def test_drains_from_several_threads_each_get_their_own_answer(combo: SchedulerClusterCombo) -> None:
    with Client(address=combo.get_address(), timeout_seconds=_CLIENT_TIMEOUT_SECONDS) as client:
        # Names of no worker: the answer names exactly what this thread asked for, and drains nothing.
        answers, errors = run_in_threads(lambda index: client.drain_workers([f"nobody-{index}"]))
    assert not errors, errors
    for index, results in answers.items():
        assert len(results) == _ROUNDS
        for result in results:
            assert result.unknown == (f"nobody-{index}",) and result.draining == (), (index, result)


def square(value: int) -> int:
    return value * value


def test_clears_from_several_threads_all_return_and_the_client_stays_usable(combo: SchedulerClusterCombo) -> None:
    with Client(address=combo.get_address(), timeout_seconds=_CLIENT_TIMEOUT_SECONDS) as client:
        answers, errors = run_in_threads(lambda _: client.clear())
        assert not errors, errors
        assert all(len(results) == _ROUNDS for results in answers.values())
        assert client.submit(square, 7).result(timeout=60) == 49
