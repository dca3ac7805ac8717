"""What `scaler_top` shows, as plain lines of text.

No terminal in here: the curses shell in `top.py` only draws these lines (and scrolls them), so the
layout is tested without one. The layout follows the product documents: four panels (scheduler |
task_manager | scheduler_sent | scheduler_received), a rule, the shortcuts, then the clients (who has
work queued, running, and how long it has waited), the worker table, and the stores (one per host:
what each holds). The sorted column's header carries a `*`.

The clients have a table of their own above the workers, not the documents' column beside them: their
counts do not fit beside a worker table, and with hundreds of workers a list beside or below them
would be off the screen. It shows the clients that have waited longest first, at most CLIENT_ROWS of
them, and sums up the rest in one line.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from scaler.protocol.monitor_messages import ClientStatus, MonitorSnapshot, StoreStatus, WorkerStatus

# Seconds without a snapshot before the screen says the scheduler may be gone (it publishes every second).
STALE_AFTER_SECONDS = 3.0

_WORKER_NAME_WIDTH = 24
_CLIENT_NAME_WIDTH = 28
# Client rows shown; the rest are summed up in one line (50 clients must leave room for the workers).
CLIENT_ROWS = 10
_STORE_HOST_WIDTH = 24


@dataclasses.dataclass(frozen=True)
class Column:
    header: str
    shortcut: str | None
    text: Callable[[WorkerStatus], str]
    sort_value: Callable[[WorkerStatus], Any] | None = None
    descending: bool = True


@dataclasses.dataclass
class Screen:
    lines: list[str]
    # Lines to draw in bold: headers.
    emphasized: set[int] = dataclasses.field(default_factory=set)


def format_percent(percent: float) -> str:
    return f"{percent:.1f}%"


def format_bytes(count: int) -> str:
    """111.8m for 111.8 MiB, as the product documents show; powers of 1024."""
    if count < 1024:
        return f"{count}b"
    value = float(count)
    for unit in ("k", "m", "g", "t"):
        value /= 1024
        if value < 1024 or unit == "t":
            return f"{value:.1f}{unit}"
    raise AssertionError("unreachable")


def format_latency(microseconds: int) -> str:
    """0.7ms, 12ms, 1.5s: the heartbeat round trip."""
    milliseconds = microseconds / 1000
    if milliseconds < 10:
        text = f"{milliseconds:.1f}"
        return (text[:-2] if text.endswith(".0") else text) + "ms"
    if milliseconds < 1000:
        return f"{milliseconds:.0f}ms"
    return f"{milliseconds / 1000:.1f}s"


def format_count(count: int) -> str:
    return f"{count:,}"


def format_wait(seconds: float) -> str:
    """0.4s, 12s, 3m05s, 2h03m: how long a client's oldest ready task has waited."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole // 60 % 60:02d}m"


def format_share(share: float) -> str:
    return f"{share:g}"


def _short_name(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "+"


COLUMNS: tuple[Column, ...] = (
    Column("worker", "n", lambda w: _short_name(w.name, _WORKER_NAME_WIDTH), lambda w: w.name, descending=False),
    Column("agt_cpu", "C", lambda w: format_percent(w.agent_cpu_percent), lambda w: w.agent_cpu_percent),
    Column("agt_rss", "M", lambda w: format_bytes(w.agent_rss_bytes), lambda w: w.agent_rss_bytes),
    Column("cpu", "c", lambda w: format_percent(w.processor_cpu_percent), lambda w: w.processor_cpu_percent),
    Column("rss", "m", lambda w: format_bytes(w.processor_rss_bytes), lambda w: w.processor_rss_bytes),
    Column("free", "f", lambda w: str(w.free), lambda w: w.free),
    Column("sent", "w", lambda w: str(w.sent), lambda w: w.sent),
    Column("queued", "d", lambda w: str(w.queued), lambda w: w.queued),
    Column("lag", "l", lambda w: format_latency(w.latency_us), lambda w: w.latency_us),
    Column("ITL", None, lambda w: w.flags),
    # Draining (client.drain_workers): it gets no new task; once it holds none it may be stopped at no cost.
    Column("state", None, lambda w: "draining" if w.draining else ""),
    Column("tags", None, lambda w: ",".join(w.tags)),
)

DEFAULT_SORT = "cpu"

# key pressed -> header of the column it sorts by
SORT_SHORTCUTS: dict[str, str] = {column.shortcut: column.header for column in COLUMNS if column.shortcut}

SHORTCUTS_LINE = "Shortcuts: " + " ".join(
    f"{column.header}[{column.shortcut}]" for column in COLUMNS if column.shortcut
) + " quit[q] scroll[Up Down PgUp PgDn Home End]"

_COLUMNS_BY_HEADER = {column.header: column for column in COLUMNS}


def render(snapshot: MonitorSnapshot | None, sort_by: str, address: str, seconds_since_last: float | None) -> Screen:
    """The whole screen; `seconds_since_last` is how long ago the snapshot arrived (None: never)."""
    if snapshot is None:
        return Screen([f"waiting for scheduler at {address} ...", "", "press q to quit"])
    lines: list[str] = []
    emphasized: set[int] = set()
    if seconds_since_last is not None and seconds_since_last > STALE_AFTER_SECONDS:
        lines.append(
            f"no snapshot from {address} for {seconds_since_last:.0f}s: is the scheduler still running? "
            "(showing the last one)"
        )
    emphasized.add(len(lines))
    panels = _panels(snapshot)
    lines.extend(panels)
    if snapshot.waiting_for_tags:
        # Tasks no connected worker may run: the operator's cue to start a worker with those tags.
        lines.append("waiting for a worker with tags: " + "; ".join(
            f"{{{', '.join(wait.tags)}}} {format_count(wait.tasks)}" for wait in snapshot.waiting_for_tags
        ))
    lines.append("-" * max(len(line) for line in panels))
    lines.append(SHORTCUTS_LINE)
    lines.append("")
    lines.append(f"Total {len(snapshot.clients)} client(s)")
    if snapshot.clients:
        emphasized.add(len(lines))
        lines.extend(client_table(snapshot.clients))
    lines.append("")
    lines.append(f"Total {len(snapshot.workers)} worker(s)")
    emphasized.add(len(lines))
    lines.extend(_worker_table(snapshot, sort_by))
    if snapshot.stores:
        lines.append("")
        lines.append(f"Total {len(snapshot.stores)} store(s)")
        emphasized.add(len(lines))
        lines.extend(store_table(snapshot.stores))
    return Screen(lines, emphasized)


def _panel(title: str, rows: list[tuple[str, str]]) -> list[str]:
    label_width = max((len(label) for label, _ in rows), default=0)
    value_width = max((len(value) for _, value in rows), default=0)
    width = max(len(title), label_width + 1 + value_width)
    body = [f"{label:>{label_width}} {value:>{value_width}}".rjust(width) for label, value in rows]
    return [title.ljust(width)] + body


def _panels(snapshot: MonitorSnapshot) -> list[str]:
    tasks = snapshot.tasks
    panels = [
        _panel("scheduler", [
            ("cpu", format_percent(snapshot.scheduler_cpu_percent)),
            ("rss", format_bytes(snapshot.scheduler_rss_bytes)),
            ("objects", format_count(snapshot.object_count)),
            ("obj_size", format_bytes(snapshot.object_bytes)),
            # Payload bytes it forwarded for peers that could not reach a store: the scheduler is not a pipe.
            ("relayed", format_bytes(snapshot.bytes_relayed)),
        ]),
        _panel("task_manager", [
            ("unassigned", format_count(tasks.unassigned)),
            # Sent to a worker and not finished: queued there or running. The scheduler cannot tell which.
            ("assigned", format_count(tasks.running)),
            ("waiting", format_count(tasks.waiting_on_dependencies)),
            ("success", format_count(tasks.success)),
            ("failed", format_count(tasks.failed)),
            ("canceled", format_count(tasks.canceled)),
            ("not_found", format_count(tasks.not_found)),
            # Ended unanswered: their client left, timed out or cleared them.
            ("dropped", format_count(tasks.dropped)),
        ]),
        _panel("scheduler_sent", [(name, format_count(count)) for name, count in sorted(snapshot.sent.items())]),
        _panel("scheduler_received", [
            (name, format_count(count)) for name, count in sorted(snapshot.received.items())
        ]),
    ]
    widths = [len(panel[0]) for panel in panels]
    height = max(len(panel) for panel in panels)
    return [
        " | ".join(
            panel[row] if row < len(panel) else " " * width for panel, width in zip(panels, widths)
        ).rstrip()
        for row in range(height)
    ]


def sort_workers(workers: list[WorkerStatus], sort_by: str) -> list[WorkerStatus]:
    column = _COLUMNS_BY_HEADER.get(sort_by, _COLUMNS_BY_HEADER[DEFAULT_SORT])
    by_name = sorted(workers, key=lambda worker: worker.name)
    if column.sort_value is None:
        return by_name
    # sorted() is stable: equal values keep the name order.
    return sorted(by_name, key=column.sort_value, reverse=column.descending)


def _percent_of(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def sort_clients(clients: list[ClientStatus]) -> list[ClientStatus]:
    """Those that waited longest first, then the busiest, then by name: a starved client comes to the top."""
    return sorted(clients, key=lambda c: (-c.oldest_ready_seconds, -(c.queued + c.running), c.name))


def client_table(clients: list[ClientStatus], limit: int = CLIENT_ROWS) -> list[str]:
    """The header, one row per shown client, and a line summing up those not shown.

    `queued` waits in the scheduler, `running` is on workers, `run%` is the client's part of all tasks on
    workers (to set against its `share`), `oldest_wait` is how long its oldest queued task has waited; `tasks`
    counts all its unfinished ones (graph tasks parked on others too).
    """
    ordered = sort_clients(clients)
    all_running = sum(client.running for client in clients)
    headers = ["client", "queued", "running", "oldest_wait", "share", "run%", "tasks", "objects", "obj_size"]
    cells = [
        [
            _short_name(client.name, _CLIENT_NAME_WIDTH), format_count(client.queued), format_count(client.running),
            format_wait(client.oldest_ready_seconds) if client.queued else "-", format_share(client.share),
            _percent_of(client.running, all_running), format_count(client.tasks), format_count(client.objects),
            format_bytes(client.object_bytes),
        ]
        for client in ordered[:limit]
    ]
    widths = [max([len(header)] + [len(row[index]) for row in cells]) for index, header in enumerate(headers)]
    table = [
        " ".join([row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]).rstrip()
        for row in [headers, *cells]
    ]
    rest = ordered[limit:]
    if rest:
        table.append(
            f"... {len(rest)} more client(s): {format_count(sum(c.queued for c in rest))} queued, "
            f"{format_count(sum(c.running for c in rest))} running (scaler_ui lists them all)"
        )
    return table


# What a store row shows: header, cell. Held counts memory and disk; spilled and pinned are parts of it.
STORE_COLUMNS: tuple[tuple[str, Callable[[StoreStatus], str]], ...] = (
    ("store_host", lambda s: _short_name(s.hostname or s.name, _STORE_HOST_WIDTH)),
    ("address", lambda s: s.data_address.removeprefix("tcp://")),
    ("held", lambda s: format_bytes(s.bytes_held)),
    ("spilled", lambda s: format_bytes(s.bytes_spilled)),
    ("pinned", lambda s: format_bytes(s.bytes_pinned)),
    ("objects", lambda s: format_count(s.objects)),
    ("capacity", lambda s: format_bytes(s.capacity_bytes)),
    ("workers", lambda s: str(s.workers)),
)


def store_table(stores: list[StoreStatus]) -> list[str]:
    """One row per store, by host then address."""
    ordered = sorted(stores, key=lambda store: (store.hostname, store.data_address))
    headers = [header for header, _ in STORE_COLUMNS]
    cells = [[text(store) for _, text in STORE_COLUMNS] for store in ordered]
    widths = [max([len(header)] + [len(row[index]) for row in cells]) for index, header in enumerate(headers)]
    return [
        " ".join([row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]).rstrip()
        for row in [headers, *cells]
    ]


def _worker_table(snapshot: MonitorSnapshot, sort_by: str) -> list[str]:
    workers = sort_workers(snapshot.workers, sort_by)
    headers = [("*" if column.header == sort_by else "") + column.header for column in COLUMNS]
    cells = [[column.text(worker) for column in COLUMNS] for worker in workers]
    widths = [max([len(header)] + [len(row[index]) for row in cells]) for index, header in enumerate(headers)]

    def table_line(row: list[str], name_left: bool) -> str:
        first = row[0].ljust(widths[0]) if name_left else row[0].rjust(widths[0])
        return " ".join([first] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])])

    return [table_line(headers, name_left=False).rstrip()] + [table_line(row, name_left=True).rstrip() for row in cells]


def visible_part(screen: Screen, offset: int, height: int) -> tuple[Screen, int]:
    """What a terminal of `height` rows shows of `screen` scrolled down by `offset` lines (clamped, and
    returned): all of it if it fits, else a slice and a last row that says which lines are shown."""
    if len(screen.lines) <= height:
        return screen, 0
    rows = max(1, height - 1)
    offset = max(0, min(offset, len(screen.lines) - rows))
    shown = screen.lines[offset:offset + rows]
    shown.append(
        f"-- lines {offset + 1}-{offset + len(shown)} of {len(screen.lines)}; scroll with Up Down PgUp PgDn Home End --"
    )
    emphasized = {row - offset for row in screen.emphasized if offset <= row < offset + rows}
    return Screen(shown, emphasized | {len(shown) - 1}), offset
