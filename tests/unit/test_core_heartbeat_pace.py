"""Heartbeats spaced out at scale (peer_registry.py, `worker_heartbeat_seconds`): with many workers the scheduler's
echo asks each to heartbeat less often, so that all of them together cost about the same as a few dozen, and a
worker that heartbeats as asked is never timed out."""

from __future__ import annotations

from core_harness import SimulatedCluster

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.peer_registry import WORKER_HEARTBEATS_PER_SECOND

CONFIG = CoreConfig(heartbeat_interval_seconds=2.0, worker_timeout_seconds=60.0, client_timeout_seconds=60.0)


def echo_to(cluster: SimulatedCluster, identity: bytes) -> m.HeartbeatEcho:
    echoes = [message for to, message in cluster.send(identity, m.Heartbeat()) if to == identity]
    assert len(echoes) == 1 and isinstance(echoes[0], m.HeartbeatEcho), echoes
    return echoes[0]


def test_a_small_cluster_keeps_the_welcomes_interval() -> None:
    cluster = SimulatedCluster(CONFIG, check_invariants=False)
    workers = [cluster.add_worker() for _ in range(int(2.0 * WORKER_HEARTBEATS_PER_SECOND))]
    assert echo_to(cluster, workers[0].identity).heartbeat_interval_ms == 0


def test_many_workers_are_asked_to_heartbeat_less_often_within_a_quarter_of_the_timeout() -> None:
    cluster = SimulatedCluster(CONFIG, check_invariants=False)
    workers = [cluster.add_worker() for _ in range(100)]
    client = cluster.add_client()
    assert echo_to(cluster, workers[0].identity).heartbeat_interval_ms == 4_000  # 100 workers, 25 a second
    assert echo_to(cluster, client.identity).heartbeat_interval_ms == 0, "only workers are spaced out"
    workers += [cluster.add_worker() for _ in range(400)]
    assert echo_to(cluster, workers[-1].identity).heartbeat_interval_ms == 15_000  # 20 s, capped at 60 s / 4
    for worker in workers[:450]:
        cluster.send(worker.identity, m.Disconnect())
    assert echo_to(cluster, workers[-1].identity).heartbeat_interval_ms == 0, "back to the welcome's interval"


def test_workers_heartbeating_as_asked_are_never_timed_out_and_a_silent_one_still_is() -> None:
    config = CoreConfig(heartbeat_interval_seconds=0.1, worker_timeout_seconds=8.0)
    cluster = SimulatedCluster(config, check_invariants=False)
    workers = [cluster.add_worker() for _ in range(100)]
    interval = echo_to(cluster, workers[0].identity).heartbeat_interval_ms / 1000
    assert interval == 2.0, "100 workers would want 4 s; a quarter of the 8 s timeout is the most asked"
    next_beat = {worker.identity: cluster.now + interval for worker in workers[1:]}  # workers[0] falls silent
    for _ in range(int(30 / 0.25)):
        cluster.tick(0.25)
        for identity, due in next_beat.items():
            if cluster.now >= due:
                assert echo_to(cluster, identity).heartbeat_interval_ms / 1000 == interval
                next_beat[identity] = cluster.now + interval
    assert set(cluster.core.peers.workers) == set(next_beat), "only the silent worker was dropped"
