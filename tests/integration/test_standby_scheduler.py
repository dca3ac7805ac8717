"""A standby scheduler (`scaler_scheduler B --standby-of A`) on one host: with both up exactly one serves, and
when the first dies the standby takes over with the same worker processes, a client's tasks in flight
completing with their results. The cut of the first host's network is test_standby_partition.py."""

from __future__ import annotations

import functools
import sys
import textwrap
import time

import psutil
import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.ui.feed import MonitorSubscriber
from tests.conftest import console_script
from tests.integration import waiting
from tests.integration.scheduler_process import wait_for_snapshot
from tests.integration.spawned import Spawned, Spawner, start_scheduler

pytestmark = pytest.mark.timeout(120)

WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure
wait_until = functools.partial(waiting.wait_until, timeout=WAIT_SECONDS)
HEARTBEAT = ["--heartbeat-interval-seconds", "0.3", "--worker-timeout-seconds", "5", "--client-timeout-seconds", "5",
             "--monitor-interval-seconds", "0.25"]  # the feed, which the tests wait on, 4 times a second

# A client given both addresses, the standby's first: 40 tasks of 0.2 s, half of them done before it says so.
CLIENT = textwrap.dedent("""
    import os, sys, time
    from scaler import Client

    def square_slowly(x):
        time.sleep(0.2)
        return x * x, os.getppid()

    with Client(address=sys.argv[1], timeout_seconds=60, heartbeat_interval_seconds=0.3) as client:
        futures = [client.submit(square_slowly, x) for x in range(40)]
        for future in futures[:10]:
            future.result(timeout=60)
        print("in flight", flush=True)
        while not os.path.exists(sys.argv[2]):  # the test kills the first scheduler, then says go on
            time.sleep(0.05)
        results = [future.result(timeout=60) for future in futures]
        assert [value for value, _ in results] == [x * x for x in range(40)], results
        print("agents", sorted({agent for _, agent in results}), flush=True)
        print("all correct", flush=True)
""")


def agents_of(cluster_pid: int) -> set[int]:
    return {
        child.pid for child in psutil.Process(cluster_pid).children(recursive=True)
        if "scaler.worker.agent" in " ".join(child.cmdline())
    }


def start_pair(spawn: Spawner, tmp_path, takeover_seconds: str = "1.5") -> tuple[str, str, Spawned, Spawned]:
    first, second = free_local_address(), free_local_address()
    first_scheduler = start_scheduler(
        spawn, first, *HEARTBEAT, "--monitor-address", f"ipc://{tmp_path}/first", name="first"
    )
    standby = start_scheduler(
        spawn, second, *HEARTBEAT, "--monitor-address", f"ipc://{tmp_path}/second", "--standby-of", first,
        "--standby-takeover-seconds", takeover_seconds, name="standby",
    )
    return first, second, first_scheduler, standby


def test_with_both_up_exactly_one_serves_whatever_address_peers_try_first(spawn: Spawner, tmp_path) -> None:
    first, second, _, standby = start_pair(spawn, tmp_path)
    # The standby's address first: peers are refused there and move on to the one that serves.
    cluster = spawn("cluster", [
        console_script("scaler_cluster"), "-n", "2", "--heartbeat-interval", "0.3", "--no-borrowing",
        f"{second},{first}",
    ])
    cluster.wait_for_log("all 2 workers registered")
    with Client(address=f"{second},{first}", timeout_seconds=30) as client, \
            MonitorSubscriber(f"ipc://{tmp_path}/first") as first_monitor, \
            MonitorSubscriber(f"ipc://{tmp_path}/second") as second_monitor:
        assert client.submit(pow, 3, 2).result(timeout=WAIT_SECONDS) == 9
        wait_for_snapshot(
            first_monitor, lambda s: len(s.workers) == 2 and len(s.clients) == 1 and len(s.stores) == 1,
            WAIT_SECONDS, "the first scheduler serving both workers, the store and the client",
        )
        time.sleep(2)  # past the standby's takeover time: it must still stand by, the first one being alive
        snapshot = wait_for_snapshot(second_monitor, lambda s: True, WAIT_SECONDS, "a snapshot of the standby")
        assert (snapshot.workers, snapshot.clients, snapshot.stores) == ([], [], [])
        assert client.submit(pow, 4, 2).result(timeout=WAIT_SECONDS) == 16
    assert "taking over" not in standby.log()


def test_the_standby_takes_over_a_scheduler_killed_with_the_same_workers(spawn: Spawner, tmp_path) -> None:
    first, second, first_scheduler, standby = start_pair(spawn, tmp_path)
    addresses = f"{first},{second}"
    cluster = spawn("cluster", [
        console_script("scaler_cluster"), "-n", "2", "--heartbeat-interval", "0.3", "--no-borrowing",
        "--death-timeout-seconds", "60", addresses,
    ])
    cluster.wait_for_log("all 2 workers registered")
    agents = agents_of(cluster.pid)
    assert len(agents) == 2
    go = tmp_path / "go"
    client = spawn("client", [sys.executable, "-c", CLIENT, addresses, str(go)])
    client.wait_for_log("in flight")
    first_scheduler.process.kill()
    first_scheduler.process.wait(timeout=WAIT_SECONDS)
    standby.wait_for_log("taking over")
    with MonitorSubscriber(f"ipc://{tmp_path}/second") as monitor:
        wait_for_snapshot(monitor, lambda s: len(s.workers) == 2 and len(s.stores) == 1, WAIT_SECONDS,
                          "the standby serving both workers and the store")
    go.touch()
    log = client.wait_for_log("all correct")
    assert client.wait_exit() == 0, log
    assert agents_of(cluster.pid) == agents, "worker processes were replaced"
    served_by = {int(pid) for pid in log.split("agents [", 1)[1].split("]", 1)[0].split(",")}
    assert served_by == agents


def test_a_standby_serving_steps_down_when_the_first_scheduler_comes_back(spawn: Spawner, tmp_path) -> None:
    first, second = free_local_address(), free_local_address()
    standby = start_scheduler(
        spawn, second, *HEARTBEAT, "--monitor-address", f"ipc://{tmp_path}/second", "--standby-of", first,
        "--standby-takeover-seconds", "1", name="standby",
    )
    standby.wait_for_log("taking over")  # nothing at the first address: the standby serves
    cluster = spawn("cluster", [
        console_script("scaler_cluster"), "-n", "2", "--heartbeat-interval", "0.3", "--no-borrowing",
        "--death-timeout-seconds", "60", f"{first},{second}",
    ])
    cluster.wait_for_log("all 2 workers registered")
    agents = agents_of(cluster.pid)
    with Client(address=f"{first},{second}", timeout_seconds=60, heartbeat_interval_seconds=0.3) as client:
        kept = client.submit(pow, 5, 2)
        assert kept.result(timeout=WAIT_SECONDS) == 25
        # The first scheduler comes (back): the earlier address wins, the standby sends everyone there.
        start_scheduler(spawn, first, *HEARTBEAT, "--monitor-address", f"ipc://{tmp_path}/first", name="first")
        standby.wait_for_log("stepping down")
        with MonitorSubscriber(f"ipc://{tmp_path}/first") as first_monitor, \
                MonitorSubscriber(f"ipc://{tmp_path}/second") as second_monitor:
            wait_for_snapshot(
                first_monitor, lambda s: len(s.workers) == 2 and len(s.clients) == 1 and len(s.stores) == 1,
                WAIT_SECONDS, "the first scheduler serving the workers, the store and the client",
            )
            wait_for_snapshot(second_monitor, lambda s: (s.workers, s.clients, s.stores) == ([], [], []),
                              WAIT_SECONDS, "the standby serving nobody")
        assert client.submit(pow, 6, 2).result(timeout=WAIT_SECONDS) == 36
    assert agents_of(cluster.pid) == agents, "worker processes were replaced"
