"""The pure parts of the client's caller-led path: the baton (one owner of the core at a time), and which link
the environment picks (client_link.py)."""

from __future__ import annotations

import threading

import pytest

from scaler.client.baton import Baton
from scaler.client.client_link import TRANSPORT_ENV, zmtp_wanted
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


@pytest.mark.parametrize(
    ("value", "address", "keys", "expected"),
    [
        (None, "tcp://127.0.0.1:1", False, True),
        (None, "tcp://127.0.0.1:1", True, False),
        ("zmq", "tcp://127.0.0.1:1", False, False),
        ("zmtp", "tcp://127.0.0.1:1", False, True),
        ("zmtp", "ipc:///tmp/scheduler", False, True),
        ("zmtp", "tcp://127.0.0.1:1,tcp://127.0.0.1:2", False, True),
        ("zmtp", "tcp://127.0.0.1:1,inproc://standby", False, False),
        ("zmtp", "tcp://127.0.0.1:1", True, False),
        ("bogus", "tcp://127.0.0.1:1", False, False),
    ],
)
def test_the_zmtp_link_is_picked_unless_libzmq_is_asked_for_or_needed(
    value: str | None, address: str, keys: bool, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv(TRANSPORT_ENV, raising=False)
    else:
        monkeypatch.setenv(TRANSPORT_ENV, value)
    curve_keys = PeerKeys("scheduler.key", "client.key_secret") if keys else None
    assert zmtp_wanted(address, curve_keys) is expected
