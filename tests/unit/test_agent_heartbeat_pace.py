"""The worker heartbeats at the interval its scheduler's echo asks for (protocol/heartbeat_pace.py), rarer than its
own when the scheduler has many workers, and its silence threshold for moving to another address follows."""

from __future__ import annotations

import random

from agent_harness import SimulatedAgent

from scaler.protocol import messages as m
from scaler.worker.agent_actions import Reconnect
from scaler.worker.config import WorkerConfig

A, B = "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"


def beat(agent: SimulatedAgent, echo: m.HeartbeatEcho) -> None:
    """A heartbeat is sent now and echoed."""
    assert agent.core.heartbeat_due(agent.now)
    agent.tick()
    agent.from_scheduler(echo)


def test_an_echo_may_ask_for_rarer_heartbeats_and_an_empty_one_brings_back_the_welcomes() -> None:
    agent = SimulatedAgent(WorkerConfig(address=A, heartbeat_interval_seconds=2.0, death_timeout_seconds=300.0))
    agent.welcome(heartbeat_interval_ms=1000)
    beat(agent, m.HeartbeatEcho(heartbeat_interval_ms=15_000))
    assert not agent.core.heartbeat_due(agent.now + 14.9)
    agent.now += 15.0
    beat(agent, m.HeartbeatEcho())
    assert not agent.core.heartbeat_due(agent.now + 0.9)
    assert agent.core.heartbeat_due(agent.now + 1.0), "the welcome asked for 1 s"


def test_the_interval_asked_is_bounded_by_the_death_timeout() -> None:
    agent = SimulatedAgent(WorkerConfig(address=A, heartbeat_interval_seconds=0.5, death_timeout_seconds=18.0))
    agent.welcome()
    beat(agent, m.HeartbeatEcho(heartbeat_interval_ms=15_000))
    assert agent.core.heartbeat_due(agent.now + 2.0), "at most a ninth of the death timeout"


def test_a_scheduler_heard_at_each_of_the_rarer_heartbeats_is_not_silent() -> None:
    agent = SimulatedAgent(WorkerConfig(address=f"{A},{B}", heartbeat_interval_seconds=1.0))
    agent.welcome()
    for _ in range(4):  # heard only every 10 s, the echoes of heartbeats it asked for: stays
        beat(agent, m.HeartbeatEcho(heartbeat_interval_ms=10_000))
        assert not any(isinstance(action, Reconnect) for action in agent.tick(9.9))
        agent.now += 0.1
    assert Reconnect(B) in agent.tick(30.1), "silent for three of its intervals: the next address"


def first_due(agent: SimulatedAgent, within: float, step: float = 0.05) -> float:
    """How long after now the next heartbeat is due (to `step`), looking no further than `within`."""
    steps = 0
    while not agent.core.heartbeat_due(agent.now + steps * step):
        steps += 1
        assert steps * step <= within + step / 2, f"no heartbeat due within {within} s"
    return steps * step


def test_a_changed_interval_starts_at_the_phase_drawn_then_keeps_its_period() -> None:
    agent = SimulatedAgent(WorkerConfig(address=A, heartbeat_interval_seconds=2.0), heartbeat_phase=0.3)
    agent.welcome()
    beat(agent, m.HeartbeatEcho(heartbeat_interval_ms=15_000))
    assert not agent.core.heartbeat_due(agent.now + 4.4)
    agent.now += 4.5
    beat(agent, m.HeartbeatEcho(heartbeat_interval_ms=15_000))  # the same interval: no new phase
    assert not agent.core.heartbeat_due(agent.now + 14.9)
    assert agent.core.heartbeat_due(agent.now + 15.0)


def test_workers_told_of_a_spaced_interval_together_spread_their_heartbeats_over_it() -> None:
    # A join storm: 200 workers learn within one second that their scheduler wants a heartbeat every 15 s.
    # In step, each would send its heartbeats in that same second of every 15; their phases spread them out.
    draw = random.Random(7).random
    firsts = []
    for index in range(200):
        agent = SimulatedAgent(
            WorkerConfig(address=A, heartbeat_interval_seconds=2.0), now=1000.0 + index / 200, heartbeat_phase=draw()
        )
        agent.welcome()
        beat(agent, m.HeartbeatEcho(heartbeat_interval_ms=15_000))
        firsts.append(agent.now + first_due(agent, within=15.0))
    busiest = max(sum(start <= first < start + 1.0 for first in firsts) for start in firsts)
    assert busiest <= 200 // 5, f"{busiest} of 200 heartbeats in one second"
