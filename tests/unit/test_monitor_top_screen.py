"""What scaler_top draws, checked as text: layout, number formats, sorting and the `*` on the sorted column."""

from __future__ import annotations

import dataclasses

import pytest

from scaler.protocol.monitor_messages import (
    ClientStatus,
    MonitorSnapshot,
    StoreStatus,
    TagsWait,
    TaskCounts,
    WorkerStatus,
)
from scaler.ui.top_screen import (
    DEFAULT_SORT,
    SHORTCUTS_LINE,
    SORT_SHORTCUTS,
    format_bytes,
    format_latency,
    format_wait,
    render,
    sort_workers,
    visible_part,
)

pytestmark = pytest.mark.timeout(30)

ADDRESS = "ipc:///tmp/127.0.0.1_2345_monitor"


def worker(name: str, **values) -> WorkerStatus:
    return WorkerStatus(name=name, capacity=1000, **values)


def snapshot() -> MonitorSnapshot:
    return MonitorSnapshot(
        sequence=3,
        published_at=1.0,
        scheduler_cpu_percent=2.5,
        scheduler_rss_bytes=int(130.1 * 1024 * 1024),
        tasks=TaskCounts(unassigned=0, running=3, success=53_704, failed=14, canceled=48, not_found=14, dropped=72_113),
        sent={"HeartbeatEcho": 283_701, "TaskResults": 53_766},
        received={"Heartbeat": 283_701, "TaskSubmission": 60},
        clients=[ClientStatus(name="host|4242", tasks=3)],
        object_count=2,
        object_bytes=2048,
        workers=[
            worker("host|1", agent_cpu_percent=0.5, agent_rss_bytes=111 << 20, processor_cpu_percent=0.0,
                   processor_rss_bytes=200 << 20, free=999, sent=10, assigned=1, queued=0, latency_us=700,
                   processor_initialized=True, has_task=True),
            worker("host|2", agent_cpu_percent=3.0, agent_rss_bytes=100 << 20, processor_cpu_percent=50.0,
                   processor_rss_bytes=100 << 20, free=1000, sent=30, queued=5, latency_us=1500,
                   processor_initialized=True),
            worker("host|3-with-a-very-long-worker-name", agent_cpu_percent=1.0, agent_rss_bytes=120 << 20,
                   processor_cpu_percent=25.0, processor_rss_bytes=150 << 20, free=998, sent=20, queued=2,
                   latency_us=400),
        ],
    )


def table_header(lines: list[str]) -> str:
    return lines[lines.index("Total 3 worker(s)") + 1]


def worker_rows(lines: list[str]) -> list[str]:
    start = lines.index("Total 3 worker(s)") + 2
    return lines[start:start + 3]


def test_layout_follows_the_documents() -> None:
    lines = render(snapshot(), DEFAULT_SORT, ADDRESS, 0.5).lines
    header = lines[0]
    for title in ("scheduler", "task_manager", "scheduler_sent", "scheduler_received"):
        assert title in header
    assert header.index("scheduler ") < header.index("task_manager") < header.index("scheduler_sent")
    text = "\n".join(lines)
    for label in ("cpu", "rss", "unassigned", "assigned", "success", "failed", "canceled", "not_found", "dropped"):
        assert label in text
    assert "72,113" in text  # tasks whose client left before they ended
    assert "53,704" in text and "283,701" in text  # thousands separators, as the documents show
    assert "130.1m" in text
    rule = next(line for line in lines if line.startswith("---"))
    assert set(rule) == {"-"}
    assert SHORTCUTS_LINE in lines
    assert SHORTCUTS_LINE.startswith("Shortcuts: worker[n] agt_cpu[C] agt_rss[M] cpu[c] rss[m] free[f] sent[w]")
    assert "queued[d] lag[l]" in SHORTCUTS_LINE
    assert "Total 3 worker(s)" in lines
    columns = table_header(lines).split()
    # The documents' columns, then what this scheduler adds: draining (drain_workers), tags (capability routing).
    assert columns == [
        "worker", "agt_cpu", "agt_rss", "*cpu", "rss", "free", "sent", "queued", "lag", "ITL", "state", "tags"
    ]
    # The clients have a table of their own, above the workers, so that many workers cannot push it away.
    assert lines.index("Total 1 client(s)") < lines.index("Total 3 worker(s)")


def task_manager_rows(lines: list[str]) -> dict[str, str]:
    start = lines[0].index("task_manager")
    rows = {}
    for line in lines[1:]:
        if line.startswith("---"):
            break
        cells = line[start:].split("|")[0].split()
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def test_stores_follow_the_workers_with_what_each_holds() -> None:
    with_stores = dataclasses.replace(snapshot(), bytes_relayed=5 << 20, stores=[
        StoreStatus(name="b|store", hostname="host-b", data_address="tcp://10.0.0.2:7001", capacity_bytes=8 << 30,
                    bytes_held=300 << 20, bytes_spilled=100 << 20, bytes_pinned=50 << 20, objects=1234, workers=4),
        StoreStatus(name="a|store", hostname="host-a", data_address="tcp://10.0.0.1:7001", capacity_bytes=1 << 30),
    ])
    lines = render(with_stores, DEFAULT_SORT, ADDRESS, 0.5).lines
    total = lines.index("Total 2 store(s)")
    assert total > lines.index("Total 3 worker(s)")
    assert lines[total + 1].split() == [
        "store_host", "address", "held", "spilled", "pinned", "objects", "capacity", "workers",
    ]
    assert lines[total + 2].split() == ["host-a", "10.0.0.1:7001", "0b", "0b", "0b", "0", "1.0g", "0"]
    assert lines[total + 3].split() == ["host-b", "10.0.0.2:7001", "300.0m", "100.0m", "50.0m", "1,234", "8.0g", "4"]
    assert task_manager_rows(lines) == task_manager_rows(render(snapshot(), DEFAULT_SORT, ADDRESS, 0.5).lines)
    assert any(line.split()[:2] == ["relayed", "5.0m"] for line in lines)
    # No store, no store table.
    assert not any(line.startswith("Total") and "store" in line for line in render(snapshot(), "cpu", ADDRESS, 0).lines)


def test_tasks_held_by_workers_are_called_assigned_not_running() -> None:
    # Two single-process workers can hold 30 tasks, queued or running: the scheduler cannot tell which.
    held = dataclasses.replace(snapshot(), tasks=TaskCounts(unassigned=5, running=30, success=1))
    rows = task_manager_rows(render(held, DEFAULT_SORT, ADDRESS, 0.5).lines)
    assert rows["unassigned"] == "5" and rows["assigned"] == "30" and rows["success"] == "1"
    assert "running" not in rows


def test_panels_line_up_under_their_separators() -> None:
    lines = render(snapshot(), DEFAULT_SORT, ADDRESS, 0.5).lines
    panel_lines = lines[: next(i for i, line in enumerate(lines) if line.startswith("---"))]
    separator_columns = [index for index, char in enumerate(panel_lines[0]) if char == "|"]
    assert len(separator_columns) == 3
    for line in panel_lines[1:]:
        for column in separator_columns:
            if column < len(line):
                assert line[column] == "|", (line, column)


def test_worker_rows_show_formatted_values_and_flags() -> None:
    rows = worker_rows(render(snapshot(), "worker", ADDRESS, 0.5).lines)
    first = rows[0].split()
    assert first[0] == "host|1"
    assert first[1:10] == ["0.5%", "111.0m", "0.0%", "200.0m", "999", "10", "0", "0.7ms", "110"]
    long_name = rows[2].split()[0]
    assert long_name.endswith("+") and len(long_name) == 24
    assert rows[0].endswith("110")  # nothing beside the table: the clients have their own


def client_rows(lines: list[str]) -> dict[str, dict[str, str]]:
    """The client table as shown: each client's cells by column header."""
    total = next(index for index, line in enumerate(lines) if line.endswith(" client(s)"))
    headers = lines[total + 1].split()
    rows = {}
    for line in lines[total + 2:]:
        if not line or line.startswith("..."):
            break
        cells = line.split()
        rows[cells[0]] = dict(zip(headers, cells))
    return rows


def test_clients_show_queued_running_oldest_wait_share_and_what_they_hold() -> None:
    status = snapshot()
    status.clients = [
        ClientStatus(name="host|4242", tasks=1_205, queued=1_200, running=3, oldest_ready_seconds=75.4),
        ClientStatus(name="host|77", tasks=0, objects=2, object_bytes=5 * 1024 * 1024, share=2.0),
        ClientStatus(name="host|9", tasks=1, running=1, share=0.5),
    ]
    rows = client_rows(render(status, "worker", ADDRESS, 0.5).lines)
    assert list(rows) == ["host|4242", "host|9", "host|77"]  # the longest wait first, then the busiest
    assert rows["host|4242"] == {
        "client": "host|4242", "queued": "1,200", "running": "3", "oldest_wait": "1m15s", "share": "1",
        "run%": "75%", "tasks": "1,205", "objects": "0", "obj_size": "0b",
    }
    assert (rows["host|9"]["oldest_wait"], rows["host|9"]["share"], rows["host|9"]["run%"]) == ("-", "0.5", "25%")
    assert (rows["host|77"]["objects"], rows["host|77"]["obj_size"], rows["host|77"]["share"]) == ("2", "5.0m", "2")


def test_fifty_clients_show_the_ten_that_waited_longest_and_sum_up_the_rest() -> None:
    status = snapshot()
    status.clients = [
        ClientStatus(name=f"client-{index:02d}", tasks=index, queued=index, oldest_ready_seconds=float(index))
        for index in range(50)
    ]
    lines = render(status, DEFAULT_SORT, ADDRESS, 0.5).lines
    assert "Total 50 client(s)" in lines
    assert list(client_rows(lines)) == [f"client-{index:02d}" for index in range(49, 39, -1)]
    hidden = sum(range(40))
    assert f"... 40 more client(s): {hidden:,} queued, 0 running (scaler_ui lists them all)" in lines
    # The workers still follow, whole.
    assert len(worker_rows(lines)) == 3


def test_no_client_no_client_table() -> None:
    lines = render(dataclasses.replace(snapshot(), clients=[]), DEFAULT_SORT, ADDRESS, 0.5).lines
    assert "Total 0 client(s)" in lines
    assert not any(line.startswith("client ") for line in lines)


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0, "0.0s"), (0.44, "0.4s"), (9.94, "9.9s"), (12.7, "12s"), (65, "1m05s"), (3599, "59m59s"), (7380, "2h03m"),
])
def test_format_wait(seconds: float, text: str) -> None:
    assert format_wait(seconds) == text


def test_a_screen_longer_than_the_terminal_scrolls_and_says_what_it_shows() -> None:
    status = snapshot()
    status.workers = [worker(f"w{index:03d}") for index in range(500)]
    screen = render(status, "worker", ADDRESS, 0.5)
    assert len(screen.lines) > 500

    top, offset = visible_part(screen, 0, 48)
    assert offset == 0 and len(top.lines) == 48
    assert top.lines[:47] == screen.lines[:47]
    assert top.lines[-1] == f"-- lines 1-47 of {len(screen.lines)}; scroll with Up Down PgUp PgDn Home End --"

    bottom, offset = visible_part(screen, 1 << 30, 48)  # End: as far as there is something to show
    assert offset == len(screen.lines) - 47 and bottom.lines[-2] == screen.lines[-1]
    assert bottom.lines[-2].startswith("w499")
    assert 47 in bottom.emphasized  # the position line
    assert all(row < 48 for row in bottom.emphasized)

    middle, offset = visible_part(screen, 100, 48)
    assert offset == 100 and middle.lines[0] == screen.lines[100]
    fits, offset = visible_part(render(snapshot(), "worker", ADDRESS, 0.5), 7, 200)
    assert offset == 0 and not fits.lines[-1].startswith("-- lines")


@pytest.mark.parametrize(("key", "header", "expected_first"), [
    ("n", "worker", "host|1"),
    ("C", "agt_cpu", "host|2"),
    ("M", "agt_rss", "host|3-with-a-very-long+"),
    ("c", "cpu", "host|2"),
    ("m", "rss", "host|1"),
    ("f", "free", "host|2"),
    ("w", "sent", "host|2"),
    ("d", "queued", "host|2"),
    ("l", "lag", "host|2"),
])
def test_each_shortcut_sorts_and_stars_its_column(key: str, header: str, expected_first: str) -> None:
    assert SORT_SHORTCUTS[key] == header
    lines = render(snapshot(), SORT_SHORTCUTS[key], ADDRESS, 0.5).lines
    columns = table_header(lines).split()
    assert f"*{header}" in columns
    assert sum(column.startswith("*") for column in columns) == 1
    assert worker_rows(lines)[0].split()[0] == expected_first


def test_sorting_is_stable_by_name_for_equal_values() -> None:
    workers = [worker("b"), worker("a"), worker("c")]
    assert [w.name for w in sort_workers(workers, "free")] == ["a", "b", "c"]
    assert [w.name for w in sort_workers(workers, "no-such-column")] == ["a", "b", "c"]


def test_no_snapshot_yet_says_what_it_waits_for() -> None:
    lines = render(None, DEFAULT_SORT, ADDRESS, None).lines
    assert lines[0] == f"waiting for scheduler at {ADDRESS} ..."
    assert any("q" in line for line in lines)


def test_a_silent_feed_is_called_out_above_the_last_snapshot() -> None:
    lines = render(snapshot(), DEFAULT_SORT, ADDRESS, 12.0).lines
    assert lines[0].startswith(f"no snapshot from {ADDRESS} for 12s")
    assert "Total 3 worker(s)" in lines
    assert not render(snapshot(), DEFAULT_SORT, ADDRESS, 1.0).lines[0].startswith("no snapshot")


def test_an_empty_cluster_renders() -> None:
    lines = render(MonitorSnapshot(), DEFAULT_SORT, ADDRESS, 0.1).lines
    assert "Total 0 worker(s)" in lines


@pytest.mark.parametrize(("count", "text"), [
    (0, "0b"), (1023, "1023b"), (1024, "1.0k"), (int(111.8 * 1024 * 1024), "111.8m"), (3 << 30, "3.0g"),
    (5 << 40, "5.0t"), (5000 << 40, "5000.0t"),
])
def test_format_bytes(count: int, text: str) -> None:
    assert format_bytes(count) == text


@pytest.mark.parametrize(("microseconds", "text"), [
    (0, "0ms"), (700, "0.7ms"), (1000, "1ms"), (1500, "1.5ms"), (12_400, "12ms"), (2_500_000, "2.5s"),
])
def test_format_latency(microseconds: int, text: str) -> None:
    assert format_latency(microseconds) == text


def test_tasks_waiting_for_tags_and_each_workers_tags_are_shown() -> None:
    """Capability routing: the operator sees which tag sets have tasks no worker can run, and what each has."""
    shown = snapshot()
    shown.workers[0].tags = ["gpu", "python"]
    shown.waiting_for_tags = [TagsWait(tags=["fpga"], tasks=1_200), TagsWait(tags=["gpu", "native"], tasks=3)]
    lines = render(shown, DEFAULT_SORT, ADDRESS, 0.5).lines
    assert "waiting for a worker with tags: {fpga} 1,200; {gpu, native} 3" in lines
    assert any(row.startswith("host|1 ") and "gpu,python" in row for row in worker_rows(lines))
    assert not any("waiting for a worker" in line for line in render(snapshot(), DEFAULT_SORT, ADDRESS, 0.5).lines)


def test_a_draining_worker_is_shown_draining() -> None:
    """After drain_workers the operator sees which workers get no new task, to stop them once they hold none."""
    shown = snapshot()
    shown.workers[1].draining = True
    lines = render(shown, "worker", ADDRESS, 0.5).lines
    header = table_header(lines)
    state_end = header.index(" state") + len(" state")
    rows = worker_rows(lines)  # by name: host|1, host|2, host|3...
    assert [row[state_end - len("draining"):state_end].strip() for row in rows] == ["", "draining", ""]
    assert "draining" not in "\n".join(render(snapshot(), "worker", ADDRESS, 0.5).lines)
