"""How a SchedulerClusterCombo and a Cluster show themselves: one line for `repr` from what they know (no
network), an HTML summary for a notebook that adds one bounded look at the monitor feed."""

from __future__ import annotations

from scaler.client.display import cluster_facts
from scaler.scheduler.metrics_server import metrics_host
from scaler.utility.html_summary import Link, Summary, Value

COMBO_TITLE = "scaler.SchedulerClusterCombo"
CLUSTER_TITLE = "scaler.Cluster"


def combo_facts(address: str, monitor_address: str, workers: int, running: bool, metrics_port: int) -> list[
    tuple[str, Value]
]:
    rows: list[tuple[str, Value]] = [
        ("scheduler", address),
        ("monitor", monitor_address),
        ("workers started", workers),
        ("running", "yes" if running else "no"),
    ]
    if metrics_port:
        rows.append(("metrics", Link(f"http://{metrics_host(address)}:{metrics_port}/metrics")))
    return rows


def combo_text(address: str, monitor_address: str, workers: int, running: bool, metrics_port: int) -> str:
    return Summary(COMBO_TITLE, tuple(combo_facts(address, monitor_address, workers, running, metrics_port))).text()


def combo_html(address: str, monitor_address: str, workers: int, running: bool, metrics_port: int) -> str:
    rows = combo_facts(address, monitor_address, workers, running, metrics_port)
    if running:
        rows.extend(cluster_facts(monitor_address))
    return Summary(COMBO_TITLE, tuple(rows)).html()


def cluster_rows(address: str, started: int, registered: int, running: int, store_address: str) -> list[
    tuple[str, Value]
]:
    return [
        ("scheduler", address),
        ("workers started here", started),
        ("registered", registered),
        ("running", running),
        ("store", store_address or "none"),
    ]


def cluster_text(address: str, started: int, registered: int, running: int, store_address: str) -> str:
    return Summary(CLUSTER_TITLE, tuple(cluster_rows(address, started, registered, running, store_address))).text()


def cluster_html(
    address: str, started: int, registered: int, running: int, store_address: str, monitor_address: str
) -> str:
    rows = cluster_rows(address, started, registered, running, store_address)
    if running:
        rows.extend(cluster_facts(monitor_address))
    return Summary(CLUSTER_TITLE, tuple(rows)).html()
