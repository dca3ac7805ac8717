"""The worker heartbeats at the interval its scheduler's echo asks for (protocol/heartbeat_pace.py), rarer than its
own when the scheduler has many workers, and its silence threshold for moving to another address follows."""

from __future__ import annotations

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
