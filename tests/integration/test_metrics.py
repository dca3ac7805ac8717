"""The scheduler's Prometheus endpoint (`--metrics-port`), scraped during a run as Prometheus would.

A real cluster (SchedulerClusterCombo(metrics_port=...)): a client with a backlog queued behind a gate,
then 50 quick tasks; each scrape is parsed by prometheus_client's own text parser.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from typing import Callable

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.scheduler.metrics_server import MISSING_PACKAGE
from tests.conftest import child_python_environment, console_script
from tests.integration.client_backlog import BACKLOG, TwoClients
from tests.integration.scheduler_process import SchedulerProcess

pytestmark = pytest.mark.timeout(120)

WAIT_SECONDS = 30.0  # an upper bound against hangs, never a measure
QUICK_TASKS = 50

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> Samples:
    """Every sample of /metrics, by name and sorted labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape_until(port: int, condition: Callable[[Samples], bool], what: str) -> Samples:
    deadline = time.monotonic() + WAIT_SECONDS
    samples: Samples = {}
    while time.monotonic() < deadline:
        samples = scrape(port)
        if condition(samples):
            return samples
        time.sleep(0.2)
    raise AssertionError(f"/metrics did not show {what} within {WAIT_SECONDS:g}s: {sorted(samples.items())}")


def client_tasks(samples: Samples, client: str, state: str) -> float:
    return samples.get(("scaler_client_tasks", (("client", client), ("state", state))), 0.0)


def finished(samples: Samples, outcome: str) -> float:
    return samples.get(("scaler_tasks_finished_total", (("outcome", outcome),)), 0.0)


def square(value: int) -> int:
    return value * value


def test_metrics_show_a_clients_backlog_then_the_finished_tasks(tmp_path) -> None:
    port = free_port()
    with TwoClients(tmp_path, metrics_port=port) as scene:
        backlog = scrape_until(
            port, lambda s: client_tasks(s, "backlog", "queued") > 0 and client_tasks(s, "backlog", "running") == 1,
            "the backlog queued",
        )
        assert client_tasks(backlog, "backlog", "queued") + 1 == BACKLOG
        assert client_tasks(backlog, "idle", "queued") == client_tasks(backlog, "idle", "running") == 0
        assert backlog[("scaler_tasks", (("state", "queued"),))] == BACKLOG - 1
        assert backlog[("scaler_clients", ())] == 2
        assert backlog[("scaler_workers", (("tags", "python"),))] == 1  # a Python worker says "python"
        # The cluster's store reports to the scheduler; the scheduler process itself, twice (ours and the standard).
        assert any(name == "scaler_store_held_bytes" for name, _ in backlog)
        assert backlog[("scaler_scheduler_rss_bytes", ())] > 0 and backlog[("process_resident_memory_bytes", ())] > 0
        # The backlog's submissions, by the class name of the message (PROTOCOL.md).
        assert backlog[("scaler_messages_received_total", (("type", "TaskSubmission"),))] >= 1

        scene.open_gate()
        idle = scene.clients[1]
        assert idle.map(square, [(value,) for value in range(QUICK_TASKS)]) == [v * v for v in range(QUICK_TASKS)]
        done = scrape_until(
            port, lambda s: finished(s, "success") == BACKLOG + QUICK_TASKS, f"{BACKLOG + QUICK_TASKS} successes"
        )
        assert finished(done, "failed") == finished(done, "canceled") == 0
        assert done[("scaler_tasks", (("state", "queued"),))] == done[("scaler_tasks", (("state", "running"),))] == 0
        assert client_tasks(done, "backlog", "unfinished") == 0


def test_a_scheduler_without_prometheus_client_says_what_to_install(tmp_path) -> None:
    # A directory first on the path where `import prometheus_client` fails, as on a machine without it.
    shadow = tmp_path / "shadow" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed here')\n")
    environment = child_python_environment()
    environment["PYTHONPATH"] = str(shadow.parent) + os.pathsep + environment["PYTHONPATH"]
    environment.pop("SCALER_EXIT_WITH_PARENT", None)
    result = subprocess.run(
        [console_script("scaler_scheduler"), free_local_address(), "--metrics-port", str(free_port())],
        env=environment, capture_output=True, text=True, timeout=WAIT_SECONDS, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1
    assert MISSING_PACKAGE in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_a_taken_metrics_port_stops_the_scheduler_naming_it(tmp_path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        environment = child_python_environment()
        environment.pop("SCALER_EXIT_WITH_PARENT", None)
        result = subprocess.run(
            [console_script("scaler_scheduler"), free_local_address(), "--metrics-port", str(port)],
            env=environment, capture_output=True, text=True, timeout=WAIT_SECONDS, stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 1
    assert f"port {port} is taken; choose another --metrics-port" in result.stdout + result.stderr


def test_without_a_metrics_port_nothing_is_served(tmp_path) -> None:
    """Off by default: a scheduler started with no --metrics-port listens on its address alone."""
    with SchedulerProcess(str(tmp_path)) as scheduler:
        with Client(scheduler.address, timeout_seconds=30) as client:
            assert client.is_connected
        listening = psutil.Process(scheduler.pid).net_connections("tcp")
        ports = {connection.laddr.port for connection in listening if connection.status == psutil.CONN_LISTEN}
        assert ports == {int(scheduler.address.rpartition(":")[2])}
