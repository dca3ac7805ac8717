"""When a standby scheduler serves, stands by and steps down (scheduler/core/standby_core.py)."""

from __future__ import annotations

from core_harness import SimClient, SimulatedCluster
from hypothesis import given
from hypothesis import strategies as st

from scaler.protocol import messages as m
from scaler.scheduler.core.standby_core import Probe, Serve, StandbyCore, StepDown

A, B = "tcp://10.0.0.1:2345", "tcp://10.0.0.2:2345"


def core(now: float = 0.0) -> StandbyCore:
    return StandbyCore((A,), takeover_seconds=3.0, probe_seconds=0.5, now=now)


def test_a_standby_stands_by_while_the_first_answers_and_probes_it_all_along() -> None:
    standby = core()
    for step in range(40):
        now = step * 0.5
        actions = standby.on_tick(now)
        assert actions == [Probe()], actions
        standby.on_answer(A, standby=False, now=now + 0.01)
    assert not standby.serving


def test_a_standby_serves_once_the_first_is_silent_for_the_takeover_time_and_steps_down_when_it_answers() -> None:
    standby = core()
    assert not any(isinstance(action, Serve) for action in standby.on_tick(3.0))
    assert Serve(3.1) in standby.on_tick(3.1)
    assert standby.serving
    assert standby.on_tick(3.2) == [], "no second Serve, no probe before its time"
    assert standby.on_answer(A, standby=False, now=4.0) == [StepDown(A)]
    assert not standby.serving and standby.serving_address == A


def test_an_answer_from_a_scheduler_standing_by_does_not_count_as_serving() -> None:
    standby = StandbyCore((A, B), takeover_seconds=3.0, probe_seconds=0.5, now=0.0)
    for step in range(10):
        standby.on_tick(step * 0.5)
        standby.on_answer(A, standby=True, now=step * 0.5)
    assert standby.serving
    assert standby.on_answer(B, standby=False, now=6.0) == [StepDown(B)]


@given(st.lists(st.tuples(st.floats(0, 2), st.sampled_from(["tick", "serving", "standing-by", "silent"])),
                max_size=80))
def test_it_serves_exactly_when_no_scheduler_before_it_was_heard_serving_for_the_takeover_time(events) -> None:
    standby, now, last_heard_serving = core(), 0.0, 0.0
    for advance, event in events:
        now += advance
        if event == "serving":
            actions = standby.on_answer(A, standby=False, now=now)
            last_heard_serving = now
            assert not standby.serving
        elif event == "standing-by":
            actions = standby.on_answer(A, standby=True, now=now)
            assert actions == []
        elif event == "tick":
            was_serving = standby.serving
            standby.on_tick(now)
            assert standby.serving == (was_serving or now - last_heard_serving > 3.0)


def test_a_client_that_left_for_a_standby_comes_back_under_its_prefix_and_nobody_else_can() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client(b"mover")
    prefix = client.prefix
    cluster.send(b"mover", m.Disconnect(reason="gone to the standby"))  # or timed out: it left this scheduler
    stranger = cluster.clients[b"stranger"] = SimClient(identity=b"stranger")
    cluster.send(b"stranger", m.Hello(role=m.Role.CLIENT, name="stranger", id_prefix=prefix))
    assert stranger.received(m.Refused) and not stranger.received(m.Welcome)
    back = cluster.clients[b"mover"] = SimClient(identity=b"mover")
    cluster.send(b"mover", m.Hello(role=m.Role.CLIENT, name="mover", id_prefix=prefix))
    (welcome,) = back.received(m.Welcome)
    assert welcome.id_prefix == prefix

