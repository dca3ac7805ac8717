"""scaler_ui's server in-process: routes, the event stream, and a stop that leaves no thread behind.

The feed comes from a MonitorPublisher on an ipc socket in a temporary folder; no scheduler runs.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Iterator

import pytest
import zmq
from test_monitor_feed import status_of_busy_cluster

from scaler.scheduler.monitor import MonitorPublisher
from scaler.ui.web import WebMonitor

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def feed(tmp_path) -> Iterator[tuple[str, MonitorPublisher]]:
    address = f"ipc://{tmp_path}/monitor"
    context = zmq.Context()
    publisher = MonitorPublisher(context, address)
    try:
        yield address, publisher
    finally:
        publisher.close()
        context.term()


@pytest.fixture
def web(feed) -> Iterator[WebMonitor]:
    monitor = WebMonitor(feed[0], host="127.0.0.1", port=0)
    monitor.start()
    try:
        yield monitor
    finally:
        monitor.stop()


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def state(web: WebMonitor) -> dict:
    return json.loads(get(web.url + "api/state")[2])


def publish_until_seen(web: WebMonitor, publisher: MonitorPublisher, status: dict, versions: int = 1) -> None:
    """PUB/SUB loses what is sent before the subscription lands: publish until the server has taken it in."""
    target = web.state.version + versions
    deadline = time.monotonic() + 15
    while web.state.version < target:
        assert time.monotonic() < deadline, "the server never took a snapshot in"
        publisher.publish(status)
        time.sleep(0.05)


def test_the_page_is_served_self_contained(web: WebMonitor) -> None:
    status, content_type, body = get(web.url)
    assert status == 200 and content_type.startswith("text/html")
    page = body.decode()
    assert "Scaler monitor" in page and 'EventSource("events")' in page
    assert "http://" not in page and "https://" not in page, "the page must fetch nothing from elsewhere"


def test_unknown_paths_are_404(web: WebMonitor) -> None:
    assert get(web.url + "nope")[0] == 404


def test_state_before_and_after_the_first_snapshot(web: WebMonitor, feed) -> None:
    before = state(web)
    assert before["feed"]["address"] == feed[0]
    assert before["feed"]["seconds_since_last"] is None  # the page says "waiting for scheduler at ..."
    assert before["state"]["snapshot"] is None

    publish_until_seen(web, feed[1], status_of_busy_cluster(), versions=2)
    after = state(web)
    assert after["feed"]["seconds_since_last"] is not None
    assert len(after["state"]["snapshot"]["workers"]) == 2
    assert after["state"]["snapshot"]["tasks"]["success"] == 2
    assert len(after["state"]["throughput"]) >= 1


def read_event(response) -> tuple[str, dict]:
    event, data = "", ""
    while True:
        line = response.readline().decode()
        assert line, "the event stream ended"
        line = line.rstrip("\n")
        if line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: "):
            data = line[len("data: "):]
        elif line == "" and event:
            return event, json.loads(data)


def test_event_stream_sends_full_then_updates(web: WebMonitor, feed) -> None:
    publish_until_seen(web, feed[1], status_of_busy_cluster())
    with urllib.request.urlopen(web.url + "events", timeout=10) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        event, message = read_event(response)
        assert event == "full"
        assert len(message["state"]["snapshot"]["workers"]) == 2
        # With the feed silent, status events keep coming (the page counts how long it has waited).
        event, message = read_event(response)
        assert event == "status" and message["feed"]["seconds_since_last"] is not None
        # One new snapshot arrives as an update.
        publish_until_seen(web, feed[1], status_of_busy_cluster())
        while event != "update":
            event, message = read_event(response)
            assert event in ("status", "update", "full")
        assert message["state"]["snapshot"]["sequence"] >= 1


def test_stop_ends_open_event_streams_and_leaves_no_thread(feed) -> None:
    monitor = WebMonitor(feed[0], host="127.0.0.1", port=0)
    monitor.start()
    response = urllib.request.urlopen(monitor.url + "events", timeout=10)
    try:
        assert read_event(response)[0] == "full"
        monitor.stop()
        monitor.stop()
    finally:
        response.close()
    leftovers = [thread.name for thread in threading.enumerate() if thread.name.startswith("scaler-ui")]
    assert leftovers == []


def test_a_busy_port_is_an_os_error_and_leaks_nothing(web: WebMonitor, feed) -> None:
    port = int(web.url.rsplit(":", 1)[1].strip("/"))
    with pytest.raises(OSError):
        WebMonitor(feed[0], host="127.0.0.1", port=port)
