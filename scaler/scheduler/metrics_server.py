"""The scheduler's /metrics endpoint: one HTTP thread, owned here, serving what metrics.py makes of the snapshot.

prometheus_client is imported only when a port is given (`--metrics-port`), so a scheduler without it
installed runs as before; with a port and without the package, the scheduler says what to install and
does not start. The thread serves one scrape at a time (Prometheus scrapes one target serially) and never
reads the scheduler's core: only the snapshot the scheduler's thread publishes.
"""

from __future__ import annotations

import errno
import logging
import threading
from typing import Any
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from scaler.protocol.monitor_messages import MonitorSnapshot

logger = logging.getLogger(__name__)

# A scraper that connects and sends nothing must not hold the only serving thread for long.
_REQUEST_TIMEOUT_SECONDS = 10.0
# How often the serving thread looks whether it was asked to stop.
_POLL_SECONDS = 0.5

MISSING_PACKAGE = "--metrics-port needs the prometheus_client package: pip install 'scaler[metrics]'"


class MetricsUnavailable(RuntimeError):
    """/metrics cannot be served: the package is missing or the port cannot be bound. The message says which."""


class _QuietHandler(WSGIRequestHandler):
    timeout = _REQUEST_TIMEOUT_SECONDS

    def log_message(self, format: str, *args: Any) -> None:  # a line per scrape would flood the log
        pass


def metrics_host(scheduler_address: str) -> str:
    """Where /metrics listens: the host of a tcp:// scheduler address (reachable by whoever reaches the
    scheduler), else loopback."""
    parts = urlsplit(scheduler_address)
    if parts.scheme != "tcp":
        return "127.0.0.1"
    host = parts.netloc.rpartition(":")[0].strip("[]")
    return "0.0.0.0" if host in ("*", "") else host


class MetricsServer:
    """Serves /metrics on (host, port) from `start()` until `close()`, which stops and joins its thread."""

    def __init__(self, host: str, port: int) -> None:
        try:
            from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
        except ImportError:
            raise MetricsUnavailable(MISSING_PACKAGE) from None
        from scaler.scheduler.metrics import SnapshotCollector

        self._collector = SnapshotCollector()
        # A registry of our own: nothing of the process-wide default registry (whatever else imported
        # prometheus_client registered there) leaks into the scheduler's metrics.
        registry = CollectorRegistry(auto_describe=True)
        registry.register(self._collector)
        ProcessCollector(registry=registry)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
        try:
            self._server: WSGIServer = make_server(
                host, port, make_wsgi_app(registry), server_class=_server_class(host), handler_class=_QuietHandler
            )
        except OSError as error:
            why = f"port {port} is taken" if error.errno == errno.EADDRINUSE else str(error)
            raise MetricsUnavailable(
                f"cannot serve metrics on {host}:{port}: {why}; choose another --metrics-port"
            ) from None
        self._thread = threading.Thread(target=self._serve, name="scaler-metrics", daemon=True)
        self._url = f"http://{host}:{port}/metrics"

    @property
    def url(self) -> str:
        return self._url

    def start(self) -> None:
        self._thread.start()

    def publish(self, snapshot: MonitorSnapshot) -> None:
        """Scheduler thread: the figures the next scrapes read."""
        self._collector.publish(snapshot)

    def _serve(self) -> None:
        try:
            self._server.serve_forever(poll_interval=_POLL_SECONDS)
        except Exception:
            logger.exception("Scheduler: the metrics endpoint failed; /metrics is no longer served")

    def close(self) -> None:
        """Stop serving and join the thread. Safe to call twice, and before `start()`."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


def _server_class(host: str) -> type[WSGIServer]:
    import socket

    class _Server(WSGIServer):
        # An IPv6 host (tcp://[::1]:2345) needs an IPv6 socket.
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # A scheduler restarted at once finds its port in TIME_WAIT, not taken.
        allow_reuse_address = True

    return _Server
