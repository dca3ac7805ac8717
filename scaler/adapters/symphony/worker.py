"""The Symphony worker: one Scaler worker that runs its tasks as tasks of an IBM Spectrum Symphony service.

It is a worker like any other to the scheduler because it is built on the worker agent's core
(scaler/worker/agent_core.py): the hello, the welcome, heartbeats, refusals, the scheduler's silence and
results over its size limits are the core's decisions. Its one processor is not a process but the
SymphonyProcessor (symphony_processor.py), which forwards each task to the Symphony service. This module is
the shell: the scheduler's socket, the Symphony session, and a loop that feeds the core the scheduler's
frames, the processor's answers, Symphony's outcomes (from the SDK's threads) and a tick.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import socket as socket_module
import time
from collections import deque
from typing import Callable

import psutil
import zmq

from scaler.adapters.symphony.sdk import SymphonySession
from scaler.adapters.symphony.symphony_processor import SymphonyProcessor
from scaler.protocol import messages as m
from scaler.protocol.zmq_messages import send_message
from scaler.utility.curve import PeerKeys, secure_peer
from scaler.utility.loop_stop import LoopStop
from scaler.utility.scheduler_addresses import parse_scheduler_addresses
from scaler.utility.setting_rules import AT_LEAST_ONE, POSITIVE_SECONDS, TASK_SLOTS, check_settings, setting
from scaler.utility.zmq_util import configure_socket, has_input, receive_frames, send_frames
from scaler.worker.agent_actions import (
    Action,
    Exit,
    Reconnect,
    Registered,
    SignalProcessor,
    StartProcessor,
    StopProcessor,
    ToProcessor,
    ToScheduler,
)
from scaler.worker.agent_core import WorkerAgentCore
from scaler.worker.config import WorkerConfig
from scaler.worker.running_task_slot import NO_TASK

logger = logging.getLogger(__name__)

# The agent's tick, as in scaler/worker/agent.py.
_TICK_SECONDS = 0.1


@dataclasses.dataclass
class SymphonyWorkerConfig:
    address: str
    service: str  # the Symphony application whose service runs the tasks
    base_concurrency: int = setting(4, AT_LEAST_ONE)
    name: str = ""
    task_queue_size: int = setting(1000, TASK_SLOTS)
    heartbeat_interval_seconds: float = setting(2.0, POSITIVE_SECONDS)
    death_timeout_seconds: float = setting(300.0, POSITIVE_SECONDS)
    curve_server_key: str | None = None
    curve_secret_key: str | None = None
    symphony_user: str = "Guest"
    symphony_password: str = "Guest"
    session_type: str | None = None  # a session type of the application's profile; None: its default

    def __post_init__(self) -> None:
        parse_scheduler_addresses(self.address)  # one, or a scheduler and its standbys in rank order
        if not self.service:
            raise ValueError("the Symphony service (application) name is empty")
        check_settings(self)


class WorkerExit(Exception):
    def __init__(self, reason: str, failed: bool = False, level: int = logging.INFO) -> None:
        super().__init__(reason)
        self.failed = failed
        self.level = level


class SymphonyWorker:
    def __init__(
        self, config: SymphonyWorkerConfig, session_factory: Callable[..., SymphonySession] = SymphonySession
    ) -> None:
        self._config = config
        self._session_factory = session_factory
        self._name = config.name or f"symphony|{socket_module.gethostname()}|{os.getpid()}"
        self._identity = f"W|{self._name}|{os.urandom(4).hex()}".encode()
        # One processor, no store, no limits of its own: Symphony runs the functions and watches them.
        agent_config = WorkerConfig(
            address=config.address, name=self._name, task_queue_size=config.task_queue_size,
            heartbeat_interval_seconds=config.heartbeat_interval_seconds,
            death_timeout_seconds=config.death_timeout_seconds, max_processors=1,
        )
        self._core = WorkerAgentCore(
            agent_config, self._name, socket_module.gethostname(), os.getpid(), self,
            concurrency=config.base_concurrency,
        )
        self._processor: SymphonyProcessor | None = None
        self._processor_identity = b""
        self._session: SymphonySession | None = None
        self._scheduler: zmq.Socket | None = None
        self._connected_to = ""  # which of the scheduler addresses (the core moves between them)
        # Symphony's answers, from the SDK's threads; the loop hands them to the processor.
        self._outcomes: queue.SimpleQueue[tuple[str, bytes | None, BaseException | None]] = queue.SimpleQueue()
        self._broken: BaseException | None = None
        # Ends the loop's wait: to stop (a signal handler, another thread), or for answers from the SDK's threads.
        self._loop_stop = LoopStop()
        self._process = psutil.Process()
        self._process.cpu_percent()

    @property
    def name(self) -> str:
        return self._name

    def stop(self) -> None:
        """Leave soon (from a signal handler or another thread)."""
        self._loop_stop.request()

    def running_task_id(self, identity: bytes) -> int:
        """The core's view of the running-task slots: none here, Symphony holds many tasks at once (see
        symphony_processor.py, which refuses the cancels of those already in Symphony)."""
        return NO_TASK

    # ------------------------------------------------------------------------------------------ lifetime

    def run(self) -> int:
        """Serve until stopped; 1 if no scheduler ever welcomed us, or Symphony failed."""
        config = self._config
        self._loop_stop.open()
        context = zmq.Context(io_threads=1)
        scheduler = self._scheduler = context.socket(zmq.DEALER)
        configure_socket(scheduler, self._identity)
        exit_code = 0
        try:
            keys = PeerKeys.resolve(config.curve_server_key, config.curve_secret_key)
            if keys is not None:
                secure_peer(scheduler, keys)
            try:
                self._session = self._session_factory(
                    config.service, config.symphony_user, config.symphony_password, f"scaler-{self._name}",
                    config.session_type, self._on_outcome, self._on_broken,
                )
            except ImportError:
                raise
            except Exception as error:
                raise WorkerExit(
                    f"could not open a Symphony session of {config.service}: {type(error).__name__}: {error}",
                    failed=True, level=logging.ERROR,
                ) from None
            logger.info(
                f"SymphonyWorker[{self._name}]: Symphony session {self._session.session_id} of {config.service} open, "
                f"base concurrency {config.base_concurrency}"
            )
            self._connected_to = self._core.addresses.current
            scheduler.connect(self._connected_to)
            self._carry_out(self._core.start(time.monotonic()), time.monotonic())
            self._loop(scheduler)
        except WorkerExit as reason:
            logger.log(reason.level, f"SymphonyWorker[{self._name}]: {reason}")
            exit_code = 1 if reason.failed else 0
        finally:
            try:
                send_message(scheduler, m.Disconnect(reason="worker exiting"), zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            scheduler.close(linger=100)
            context.term()
            if self._session is not None:
                try:
                    self._session.close()
                except Exception as error:
                    logger.warning(f"SymphonyWorker[{self._name}]: closing the Symphony session: {error}")
            self._loop_stop.close()
        return exit_code

    def _loop(self, scheduler: zmq.Socket) -> None:
        core = self._core
        poller = zmq.Poller()
        poller.register(scheduler, zmq.POLLIN)
        poller.register(self._loop_stop.fileno(), zmq.POLLIN)
        next_tick = 0.0
        while not self._loop_stop.requested:
            events = dict(poller.poll(int(_TICK_SECONDS * 1000)))
            now = time.monotonic()
            if scheduler in events:
                while has_input(scheduler):
                    self._carry_out(core.on_scheduler_frames(receive_frames(scheduler), now), now)
            if self._loop_stop.fileno() in events:
                self._loop_stop.drain()
            if self._processor is not None:
                while True:
                    try:
                        self._processor.on_outcome(*self._outcomes.get_nowait())
                    except queue.Empty:
                        break
                self._processor.pump(now)
                self._from_processor(now)
            if self._broken is not None:
                raise WorkerExit(f"the Symphony session failed: {self._broken}", failed=True, level=logging.ERROR)
            if now >= next_tick:
                next_tick = now + _TICK_SECONDS
                usage = None
                if core.heartbeat_due(now):
                    usage = m.Heartbeat(
                        cpu_percent=self._process.cpu_percent(), rss_bytes=self._process.memory_info().rss
                    )
                self._carry_out(core.on_tick(now, None, usage), now)

    # ------------------------------------------------------------------------------------------ actions

    def _carry_out(self, actions: list[Action], now: float) -> None:
        pending = deque(actions)
        while pending:
            action = pending.popleft()
            if isinstance(action, ToScheduler):
                assert self._scheduler is not None
                try:
                    send_frames(self._scheduler, action.frames, zmq.NOBLOCK if action.may_drop else 0)
                except zmq.Again:
                    pass  # a heartbeat with no usable connection: the death timeout decides
            elif isinstance(action, ToProcessor):
                assert self._processor is not None
                self._processor.on_frames(action.frames)
                pending.extend(self._from_processor(now, carry_out=False))
            elif isinstance(action, StartProcessor):
                # The processor lives here: it is ready at once, and says hello as a processor process would.
                assert self._session is not None and self._processor is None, "a Symphony worker has one processor"
                self._processor = SymphonyProcessor(self._name, self._config.base_concurrency, self._session)
                self._processor_identity = action.identity
                hello = m.Hello(role=m.Role.WORKER, pid=os.getpid())
                pending.extend(self._core.on_processor_frames(action.identity, m.encode(hello), now))
            elif isinstance(action, Reconnect):
                assert self._scheduler is not None
                self._scheduler.disconnect(self._connected_to)
                self._connected_to = action.address
                self._scheduler.connect(action.address)
            elif isinstance(action, Registered):
                logger.info(f"SymphonyWorker[{self._name}]: connected to the scheduler at {self._connected_to}")
            elif isinstance(action, Exit):
                raise WorkerExit(action.reason, action.failed, action.level)
            elif isinstance(action, (SignalProcessor, StopProcessor)):
                pass  # never asked of it: no running-task slot, and no processor beyond the first

    def _from_processor(self, now: float, carry_out: bool = True) -> list[Action]:
        """Hand the processor's messages to the core; returns (or carries out) the core's actions."""
        assert self._processor is not None
        actions: list[Action] = []
        for message in self._processor.take_messages():
            actions.extend(self._core.on_processor_frames(self._processor_identity, m.encode(message), now))
        if carry_out:
            self._carry_out(actions, now)
            return []
        return actions

    # ------------------------------------------------------------------------------------------ SDK threads

    def _on_outcome(self, symphony_id: str, payload: bytes | None, error: BaseException | None) -> None:
        """From the SDK's threads: hand the answer to the loop."""
        self._outcomes.put((symphony_id, payload, error))
        self._loop_stop.wake()

    def _on_broken(self, error: BaseException) -> None:
        self._broken = error
        self._loop_stop.wake()


def run_symphony_worker(config: SymphonyWorkerConfig) -> int:
    import signal

    worker = SymphonyWorker(config)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: worker.stop())
    return worker.run()
