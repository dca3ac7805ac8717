"""How a Client shows itself: one line for `repr` (no network), an HTML summary for a notebook (one bounded
look at the monitor feed, cluster_glance.py)."""

from __future__ import annotations

from typing import Any

from scaler.client.cluster_glance import glance, ui_url
from scaler.utility.html_summary import Link, Summary, Value
from scaler.utility.monitor_address import default_monitor_address


def client_facts(address: str, name: str, connected: bool, unfinished_tasks: int) -> list[tuple[str, Value]]:
    rows: list[tuple[str, Value]] = [("scheduler", address)]
    if name:
        rows.append(("name", name))
    rows.append(("connected", "yes" if connected else "no"))
    rows.append(("unfinished tasks", unfinished_tasks))
    return rows


def cluster_facts(monitor_address: str) -> list[tuple[str, Value]]:
    """The workers and tasks of the whole cluster as the feed shows them now, and the web view if known."""
    seen = glance(monitor_address)
    rows: list[tuple[str, Value]]
    if seen is None:
        rows = [("workers", f"unknown (no monitor feed read at {monitor_address})")]
    else:
        rows = [
            ("workers", seen.workers),
            ("cluster tasks", f"{seen.queued} queued, {seen.running} running, {seen.finished} finished"),
            ("clients", seen.clients),
        ]
    url = ui_url()
    if url is not None:
        rows.append(("dashboard", Link(url)))
    return rows


def client_text(client: Any) -> str:
    return Summary("scaler.Client", tuple(client_facts(*_facts_of(client)))).text()


def client_html(client: Any) -> str:
    address, name, connected, unfinished_tasks = _facts_of(client)
    rows = client_facts(address, name, connected, unfinished_tasks)
    if connected:
        rows.extend(cluster_facts(default_monitor_address(address)))
    return Summary("scaler.Client", tuple(rows)).html()


def _facts_of(client: Any) -> tuple[str, str, bool, int]:
    """A Client's address, name, whether it is connected and its unfinished tasks: counts it keeps, no network.
    Also of a client whose __init__ failed half-way, which a traceback may show."""
    connection = getattr(client, "_connection", None)
    return (
        getattr(client, "_address", "?"), getattr(client, "_name", ""),
        connection is not None and connection.is_open, 0 if connection is None else connection.unfinished_tasks,
    )
