"""The scheduler's I/O shell: one ROUTER socket, one thread, feeding the core and sending what it returns."""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import signal
import time
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlsplit

import psutil
import zmq

from scaler.protocol import messages as m
from scaler.protocol.monitor_messages import MonitorSnapshot
from scaler.protocol.versions import INSTALLED, Speaks
from scaler.scheduler.config import MONITOR_DIRECTORY, SchedulerConfig, default_monitor_address
from scaler.scheduler.core.core_config import CoreConfig, first_id_prefix_at
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.scheduler_core import SchedulerCore
from scaler.scheduler.core.standby_core import Serve, StandbyAction, StandbyCore, StepDown
from scaler.scheduler.monitor import MonitorPublisher
from scaler.scheduler.outgoing_batch import OutgoingBatch
from scaler.scheduler.router_link import LinkStartError, RouterLink, open_router_link
from scaler.scheduler.standby import StandbyLink
from scaler.utility.bad_frame_log import BadFrameLog, short_identity
from scaler.utility.curve import ServerKeys
from scaler.utility.ipc_sockets import remove_stale_monitor_sockets
from scaler.utility.loop_stop import LoopStop
from scaler.utility.readiness import FAILED, LISTENING, ReadinessReporter

if TYPE_CHECKING:
    from scaler.scheduler.metrics_server import MetricsServer

logger = logging.getLogger(__name__)

# Receive at most this many messages before checking timers, so a flood cannot starve heartbeats.
_MAX_MESSAGES_PER_WAKE = 512
_MESSAGES_PER_SEND = 32
_TICK_SECONDS = 0.25


class SchedulerStartError(RuntimeError):
    """The scheduler could not start serving (for example, its address is taken)."""


class SchedulerServer:
    def __init__(self, config: SchedulerConfig, speaks: Speaks = INSTALLED) -> None:
        self._config = config
        self._speaks = speaks
        self._core = SchedulerCore(CoreConfig.from_settings(config, first_id_prefix_at(time.time()), speaks))
        self._stop = LoopStop()
        # While run() runs, stop() writes here, so that a poll in progress ends at once instead of at the next tick.
        self._process = psutil.Process()
        self._process.cpu_percent()
        # Messages by class name since start, for the monitor feed.
        self._received: dict[str, int] = {}
        self._sent: dict[str, int] = {}
        self._bad_frame_log = BadFrameLog(config.bad_frame_log_seconds)
        self._batch = OutgoingBatch()
        # What handles a peer's message: the core while serving; a refusal while standing by (--standby-of).
        self._handler: Callable[[list[m.Buffer]], list[Outgoing]] = self._handle
        self._standby: StandbyLink | None = None

    def _monitor_snapshot(self) -> MonitorSnapshot:
        """What the monitor feed publishes: the core's status plus this process's own usage and counters."""
        status = self._core.status(time.monotonic())
        return MonitorSnapshot(
            scheduler_cpu_percent=self._process.cpu_percent(),
            scheduler_rss_bytes=self._process.memory_info().rss,
            tasks=status.tasks,
            sent=dict(self._sent),
            received=dict(self._received),
            clients=status.clients,
            object_count=status.object_count,
            object_bytes=status.object_bytes,
            workers=status.workers,
            waiting_for_tags=status.waiting_for_tags,
            stores=status.stores,
            bytes_relayed=status.bytes_relayed,
            standing_by=self._standby is not None and not self._standby.core.serving,
        )

    def stop(self) -> None:
        """Ask the loop to finish; safe from any thread or a signal handler."""
        self._stop.request()

    def run(self, exit_with_parent: int | None = None, on_listening: Callable[[], None] | None = None) -> None:
        """Serve until stopped. Raises SchedulerStartError, having touched nothing, if it cannot listen.

        The main address is bound first: a scheduler that cannot have it stops before it binds the
        monitor address, which is derived from it and belongs to whoever holds it.
        """
        config = self._config
        monitor_address = config.monitor_address or default_monitor_address(config.address)
        try:
            curve_keys = ServerKeys.resolve(config.curve_secret_key, config.curve_authorized_keys)
        except ValueError as error:
            raise SchedulerStartError(f"Scheduler: cannot start: {error}") from None
        self._stop.open()
        context = zmq.Context(io_threads=config.io_threads)
        link: RouterLink | None = None
        monitor: MonitorPublisher | None = None
        metrics: MetricsServer | None = None
        try:
            if curve_keys is None:
                _warn_if_exposed(config.address)
            try:
                link = open_router_link(config, context, curve_keys)
            except LinkStartError as error:
                raise SchedulerStartError(f"Scheduler: {error}") from None
            if config.metrics_port:
                # Imported only for --metrics-port: its HTTP server (wsgiref, http.server, email) costs ~30 ms of
                # CPU to import, which every scheduler started without metrics would pay.
                from scaler.scheduler.metrics_server import MetricsServer, MetricsUnavailable, metrics_host

                try:
                    metrics = MetricsServer(metrics_host(config.address), config.metrics_port)
                except MetricsUnavailable as error:
                    raise SchedulerStartError(f"Scheduler: cannot start: {error}") from None
            monitor = MonitorPublisher(context, monitor_address)
            if monitor.is_bound:
                logger.info(f"Scheduler: monitor address is {monitor_address}")
            logger.info(f"Scheduler: listening on {config.address} ({self._speaks})")
            if metrics is not None:
                metrics.start()
                logger.info(f"Scheduler: Prometheus metrics at {metrics.url}")
            if on_listening is not None:
                on_listening()
            if config.standby_of:
                self._standby = StandbyLink(context, StandbyCore(
                    tuple(config.standby_of.split(",")), config.standby_takeover_seconds,
                    min(1.0, config.standby_takeover_seconds / 4), time.monotonic(),
                ), config.heartbeat_interval_seconds, curve_keys)
                self._handler = self._refuse_as_standby
                logger.info(f"Scheduler: standing by for {config.standby_of}: serving once none of them serves "
                            f"for {config.standby_takeover_seconds:g}s")
            removed = remove_stale_monitor_sockets(MONITOR_DIRECTORY)
            if removed:
                logger.info(f"Scheduler: removed {len(removed)} monitor socket(s) left by schedulers that died")
            self._loop(link, monitor, metrics, exit_with_parent)
        finally:
            if self._standby is not None:
                self._standby.close()
            if metrics is not None:
                metrics.close()
            if monitor is not None:
                monitor.close()
            if link is not None:
                link.close()
            context.term()
            self._stop.close()
            if monitor is not None:
                logger.info("Scheduler: stopped")

    def _loop(
        self, link: RouterLink, monitor: MonitorPublisher, metrics: MetricsServer | None,
        exit_with_parent: int | None,
    ) -> None:
        standby = self._standby
        poller = None
        if standby is None:
            link.watch(self._stop.fileno())
        else:
            # The probes are zmq sockets: zmq's poll watches them beside the link and the stop pipe.
            poller = zmq.Poller()
            poller.register(link.pollable, zmq.POLLIN)
            poller.register(self._stop.fileno(), zmq.POLLIN)
            for probe_socket in standby.sockets:
                poller.register(probe_socket, zmq.POLLIN)
        next_tick = time.monotonic() + _TICK_SECONDS
        next_monitor = 0.0
        while not self._stop.requested and not self._core.should_exit:  # a step-down replaces the core
            if poller is None:
                link.wait(next_tick - time.monotonic())
            else:
                # Rounded up: rounded down, the last millisecond before each tick is spent polling with no wait.
                events = poller.poll(max(0, math.ceil((next_tick - time.monotonic()) * 1000)))
                assert standby is not None
                for probe_socket, _ in events:
                    if probe_socket in standby.sockets:
                        self._on_standby(link, standby.on_readable(probe_socket, time.monotonic()))
            handle = self._handler
            # What one wake's messages answer goes out together, one client's results merged (outgoing_batch.py),
            # and at least every _MESSAGES_PER_SEND messages, so that no answer waits for a whole wake.
            batch = self._batch
            for frames in link.receive(time.monotonic(), _MAX_MESSAGES_PER_WAKE):
                batch.add(handle(frames))
                if batch.handled >= _MESSAGES_PER_SEND:
                    self._send(link, batch.take())
            if batch.handled:
                self._send(link, batch.take())
            for sender, what in link.take_refused():
                self._log_bad_frame(sender, what)
            now = time.monotonic()
            if now >= next_tick:
                lost = link.take_lost(now)
                try:
                    if lost and handle == self._handle:  # standing by, no peer is ours
                        self._send(link, self._core.on_connections_lost(lost, now))
                    self._send(link, self._core.on_tick(now))
                except Exception:
                    logger.exception("Scheduler: timer handling failed")
                link.tick(now)
                next_tick = now + _TICK_SECONDS
                if standby is not None:
                    self._on_standby(link, standby.on_tick(now))
                for line in self._bad_frame_log.on_tick(now):
                    logger.warning(line)
                if now >= next_monitor or monitor.newcomer_waiting:
                    next_monitor = now + self._config.monitor_interval_seconds
                    # One snapshot serves the feed and /metrics; with neither watching, none is made.
                    watched = monitor.watched
                    if watched or metrics is not None:
                        snapshot = self._monitor_snapshot()
                        if watched:
                            monitor.publish(snapshot)
                        if metrics is not None:
                            metrics.publish(snapshot)
                if exit_with_parent is not None and os.getppid() != exit_with_parent:
                    logger.warning("Scheduler: parent process is gone, exiting")
                    return

    def _handle(self, frames: list[m.Buffer]) -> list[Outgoing]:
        sender = bytes(frames[0])
        if len(frames) > 1 and len(frames[1]) > self._config.max_control_frame_bytes:
            self._log_bad_frame(sender, f"a control frame of {len(frames[1]):,} bytes")
            return self._core.on_bad_frame(
                sender, f"control frame over {self._config.max_control_frame_bytes:,} bytes; submit in smaller batches"
            )
        try:
            message = m.decode(frames[1:])
        except m.ProtocolDecodeError as error:
            self._log_bad_frame(sender, f"an undecodable message ({error})")
            return self._core.on_bad_frame(sender, str(error))
        name = type(message).__name__
        self._received[name] = self._received.get(name, 0) + 1
        try:
            return self._core.on_message(sender, message, time.monotonic())
        except Exception:
            # A bug triggered by one message must not take the whole cluster down with it.
            logger.exception(f"Scheduler: failed to handle {name} from {short_identity(sender)}")
            return self._core.on_bad_frame(sender, f"scheduler could not handle {name}", drop_sender=False)

    def _refuse_as_standby(self, frames: list[m.Buffer]) -> list[Outgoing]:
        """Standing by: whatever a peer sends is answered by where to go instead, never by the core."""
        assert self._standby is not None
        serving = self._standby.core.serving_address
        return [(bytes(frames[0]), m.Refused(
            reason=f"standby scheduler: the scheduler at {serving} serves this cluster; try the next address",
            standby=True,
        ))]

    def _on_standby(self, link: RouterLink, actions: list[StandbyAction]) -> None:
        for action in actions:
            if isinstance(action, Serve):
                logger.warning(f"Scheduler: no scheduler ranked before this one served for "
                               f"{action.silent_seconds:.1f}s; taking over: serving peers now")
                self._handler = self._handle
            elif isinstance(action, StepDown):
                # The earlier address wins: every peer here goes there and rejoins; this core's state goes with them.
                core = self._core
                peers = [*core.peers.clients, *core.peers.workers, *core.stores.stores]
                logger.warning(f"Scheduler: the scheduler at {action.address} serves again; stepping down, sending "
                               f"{len(peers)} peers there")
                self._handler = self._refuse_as_standby
                self._send(link, [outgoing for identity in peers for outgoing in self._refuse_as_standby([identity])])
                self._core = SchedulerCore(CoreConfig.from_settings(self._config, first_id_prefix_at(time.time())))

    def _log_bad_frame(self, sender: bytes, what: str) -> None:
        for line in self._bad_frame_log.on_dropped(sender, what, time.monotonic()):
            logger.warning(line)

    def _send(self, link: RouterLink, outgoing: list[Outgoing]) -> None:
        for identity, message in outgoing:
            name = type(message).__name__
            self._sent[name] = self._sent.get(name, 0) + 1
            try:
                link.send([identity, *m.encode(message)])
            except zmq.ZMQError as error:
                logger.warning(f"Scheduler: could not send {name} to {short_identity(identity)}: {error}")
        link.flush()


def _warn_if_exposed(address: str) -> None:
    parts = urlsplit(address)
    if parts.scheme != "tcp":
        return
    host = (parts.hostname or "").strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        logger.warning(
            f"Scheduler: listening on {address}, beyond loopback, without authentication: "
            "anyone who can reach this port can run code on your workers"
        )


def run_scheduler(
    config: SchedulerConfig, exit_with_parent: int | None = None, reporter: ReadinessReporter | None = None,
    speaks: Speaks = INSTALLED,
) -> None:
    """Run until SIGINT/SIGTERM or an accepted shutdown request; tell `reporter` (our parent) once we listen.
    `speaks`: the release and protocol it says it is (CoreConfig.speaks)."""
    server = SchedulerServer(config, speaks)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: server.stop())
    on_listening = None
    if reporter is not None:
        def on_listening() -> None:
            reporter.report(LISTENING, config.address)
            reporter.close()
    try:
        server.run(exit_with_parent=exit_with_parent, on_listening=on_listening)
    except SchedulerStartError as error:
        logger.error(str(error))
        if reporter is not None:
            reporter.report(FAILED, str(error))
        raise SystemExit(1) from None
