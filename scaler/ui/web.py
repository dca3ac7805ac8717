"""`scaler_ui`'s server: one small page, its state as JSON, and live updates as Server-Sent Events.

Built on the standard library's `http.server`: the page is self-contained (its charts are drawn on a
canvas by a few lines of inline script), so the server needs no web framework, the browser fetches
nothing from the internet, and the `gui` extra installs nothing more. One thread reads the feed; each
browser tab holds one short-lived request per page load plus one event stream.

Routes: `/` the page, `/api/state` everything kept (JSON), `/events` the event stream: a `full` event
first, then an `update` event per snapshot and a `status` event whenever the feed is silent.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from scaler.protocol.monitor_feed import MonitorFeeds
from scaler.ui.history import MonitorHistory

logger = logging.getLogger(__name__)

# A silent feed still gets a status event this often, so the page can say how long it has waited.
_STATUS_INTERVAL_SECONDS = 1.0
_FEED_WAIT_SECONDS = 0.25


def _page() -> bytes:
    return importlib.resources.files("scaler.ui").joinpath("web_page.html").read_bytes()


class FeedState:
    """The history shared by the feed thread (writer) and the request threads (readers)."""

    def __init__(self, address: str, history: MonitorHistory | None = None) -> None:
        self.address = address
        self.history = history if history is not None else MonitorHistory()
        self.version = 0
        self.last_received_at: float | None = None
        self.condition = threading.Condition()
        self._full_cache: tuple[int, str] | None = None
        self._update_cache: tuple[int, str] | None = None

    def add(self, snapshot: Any) -> None:
        with self.condition:
            self.last_received_at = time.monotonic()
            if self.history.add(snapshot):
                self.version += 1
            self.condition.notify_all()

    def feed_json(self) -> dict[str, Any]:
        waited = None if self.last_received_at is None else time.monotonic() - self.last_received_at
        return {"address": self.address, "seconds_since_last": waited, "generation": self.history.generation}

    def full_json(self) -> str:
        """Everything kept, as one JSON text; called with the condition held."""
        if self._full_cache is None or self._full_cache[0] != self.version:
            self._full_cache = (self.version, json.dumps(self.history.to_json()))
        return self._full_cache[1]

    def update_json(self) -> str:
        if self._update_cache is None or self._update_cache[0] != self.version:
            self._update_cache = (self.version, json.dumps(self.history.update_json()))
        return self._update_cache[1]


class WebMonitor:
    """Serves the web view of the monitor feed at `address` on http://host:port until `stop()`."""

    def __init__(self, address: str, host: str = "127.0.0.1", port: int = 8081) -> None:
        self.state = FeedState(address)
        self._host = host
        self._stopping = threading.Event()
        self._stopped = False
        self._subscriber = MonitorFeeds(address)  # several: the serving scheduler's feed
        try:
            self._server = _Server((host, port), _Handler, self)
        except OSError:
            self._subscriber.close()
            raise
        self._threads = [
            threading.Thread(target=self._read_feed, name="scaler-ui-feed", daemon=True),
            threading.Thread(target=self._server.serve_forever, name="scaler-ui-http", daemon=True),
        ]

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._server.server_port}/"

    @property
    def stopping(self) -> threading.Event:
        """Set to ask for a stop (a signal handler may); `stop()` then does it."""
        return self._stopping

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop serving, end every event stream, and close the feed. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        with self.state.condition:
            self.state.condition.notify_all()
        if self._threads[1].is_alive():
            self._server.shutdown()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=5)
        self._server.server_close()  # joins the request threads, which end on `stopping`
        self._subscriber.close()

    def __enter__(self) -> WebMonitor:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _read_feed(self) -> None:
        while not self._stopping.is_set():
            snapshot = self._subscriber.receive(_FEED_WAIT_SECONDS)
            if snapshot is not None:
                self.state.address = self._subscriber.address  # the one shown, of several
                self.state.add(snapshot)


class _Server(ThreadingHTTPServer):
    # Request threads are joined at server_close(); event streams end within a status interval of stop().
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], handler: type, monitor: WebMonitor) -> None:
        self.monitor = monitor
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "scaler_ui"
    # A browser that stops reading cannot hold a thread (and so stop()) for longer than this.
    timeout = 10

    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        path = urlsplit(self.path).path
        if path in ("/", "/index.html"):
            self._reply(200, _page(), "text/html; charset=utf-8")
        elif path == "/api/state":
            state = self.server.monitor.state
            with state.condition:
                body = f'{{"feed": {json.dumps(state.feed_json())}, "state": {state.full_json()}}}'
            self._reply(200, body.encode(), "application/json")
        elif path == "/events":
            self._stream_events()
        else:
            self._reply(404, b"not found\n", "text/plain; charset=utf-8")

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug(f"scaler_ui: {self.address_string()} {format % args}")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _stream_events(self) -> None:
        monitor = self.server.monitor
        state = monitor.state
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        sent_version: int | None = None
        sent_generation: int | None = None
        try:
            while not monitor.stopping.is_set():
                with state.condition:
                    if state.version == sent_version and not monitor.stopping.is_set():
                        state.condition.wait(timeout=_STATUS_INTERVAL_SECONDS)
                    if monitor.stopping.is_set():
                        return
                    feed = json.dumps(state.feed_json())
                    generation = state.history.generation
                    if sent_version is None or generation != sent_generation or state.version > sent_version + 1:
                        event, data = "full", state.full_json()
                    elif state.version == sent_version + 1:
                        event, data = "update", state.update_json()
                    else:
                        event, data = "status", "null"
                    sent_version, sent_generation = state.version, generation
                self.wfile.write(f'event: {event}\ndata: {{"feed": {feed}, "state": {data}}}\n\n'.encode())
                self.wfile.flush()
        except OSError:
            pass  # the tab was closed, or stopped reading
