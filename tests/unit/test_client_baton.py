"""The pure parts of the client's caller-led path: the baton (one owner of the core at a time), the split of a
batch too large for one message, and which link the environment picks (client_link.py)."""

from __future__ import annotations

import threading

import pytest

from scaler.client.baton import Baton
from scaler.client.client_link import TRANSPORT_ENV, zmtp_wanted
from scaler.client.outbox import halves
from scaler.utility.curve import PeerKeys


def test_the_baton_has_one_holder_and_is_not_reentrant() -> None:
    baton = Baton()
    assert not baton.held_here()
    assert baton.try_take()
    assert baton.held_here()
    assert not baton.try_take()  # a done-callback of the holder leaves its work to the queue
    seen: list[bool] = []
    other = threading.Thread(target=lambda: seen.extend([baton.try_take(), baton.held_here()]))
    other.start()
    other.join(10)
    assert seen == [False, False]
    baton.give_back()
    assert not baton.held_here()
    assert baton.try_take()
    baton.give_back()


def test_a_thread_waiting_for_the_baton_says_so_until_it_has_it() -> None:
    baton = Baton()
    assert baton.try_take()
    wanted_seen = threading.Event()
    pause = threading.Event()
    taken: list[bool] = []

    def take() -> None:
        taken.append(baton.take(30.0))
        baton.give_back()

    waiter = threading.Thread(target=take)
    waiter.start()
    for _ in range(1000):
        if baton.wanted:
            wanted_seen.set()
            break
        pause.wait(0.01)
    assert wanted_seen.is_set()
    baton.give_back()
    waiter.join(30)
    assert taken == [True] and not baton.wanted
    assert baton.try_take()  # free again
    baton.give_back()


def test_a_batch_in_halves_keeps_each_tasks_arguments_positions_and_references() -> None:
    ids = [10, 11, 12, 13, 14]
    args = [bytes([value]) for value in range(10)]  # two arguments a task
    first, second = halves(ids, args, 2, [1, 4, 9], [(4, 99), (8, 98)])
    assert first == ([10, 11], args[:4], [1], [])
    assert second == ([12, 13, 14], args[4:], [0, 5], [(0, 99), (4, 98)])


@pytest.mark.parametrize(
    ("value", "address", "keys", "expected"),
    [
        (None, "tcp://127.0.0.1:1", False, False),
        ("zmq", "tcp://127.0.0.1:1", False, False),
        ("zmtp", "tcp://127.0.0.1:1", False, True),
        ("zmtp", "ipc:///tmp/scheduler", False, True),
        ("zmtp", "tcp://127.0.0.1:1,tcp://127.0.0.1:2", False, True),
        ("zmtp", "tcp://127.0.0.1:1,inproc://standby", False, False),
        ("zmtp", "tcp://127.0.0.1:1", True, False),
        ("bogus", "tcp://127.0.0.1:1", False, False),
    ],
)
def test_the_zmtp_link_is_picked_only_when_asked_for_and_able(
    value: str | None, address: str, keys: bool, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    else:
        monkeypatch.setenv(TRANSPORT_ENV, value)
    curve_keys = PeerKeys("scheduler.key", "client.key_secret") if keys else None
    assert zmtp_wanted(address, curve_keys) is expected
