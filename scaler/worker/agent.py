"""The worker agent: the I/O shell between the scheduler and the processes that run the functions.

It registers with the scheduler, forwards task batches to its active processor and results back
(without re-encoding them), heartbeats with its own and its processors' CPU and memory, replaces a
processor that crashes (blaming only the task that was running), and keeps the worker serving while a
task waits on nested tasks by letting another processor take over (docs/nested_tasks.md).
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import logging
import math
import os
import shutil
import signal
import socket as socket_module
import struct
import subprocess
import sys
import threading
import time
import uuid

import cloudpickle
import psutil
import zmq

from scaler.errors import MemoryLimitError, PayloadTooLargeError, TaskTimeoutError
from scaler.protocol import messages as m
from scaler.utility.curve import PeerKeys, secure_peer
from scaler.utility.readiness import FAILED, REGISTERED, ReadinessReporter
from scaler.utility.zmq_util import has_input, receive_frames, send_frames, send_message
from scaler.worker.config import WorkerConfig
from scaler.worker.processor import AGENT_SIGNAL
from scaler.worker.work_directory import (
    PROCESSOR_SOCKET_NAME,
    make_work_directory,
    remove_abandoned_work_directories,
)

logger = logging.getLogger(__name__)

_RUNNING_TASK_FORMAT = "<Q"
_PROCESSOR_CHECK_SECONDS = 0.1
_PROCESSOR_STOP_SECONDS = 3.0
# Idle processors are kept for the next nested wait (starting one costs far more than keeping it);
# beyond the first, a spare idle this long is stopped.
_SPARE_IDLE_SECONDS = 30.0


class WorkerExit(Exception):
    """Raised inside the loop to leave it with a reason for the log, at `level`; `failed` also makes the
    process exit with status 1 (a worker that never got a word from its scheduler has not done its job)."""

    def __init__(self, reason: str, failed: bool = False, level: int = logging.INFO) -> None:
        super().__init__(reason)
        self.failed = failed
        self.level = logging.ERROR if failed else level


class ProcessorRole(enum.Enum):
    ACTIVE = "active"        # receives the tasks the scheduler sends
    BLOCKED = "blocked"      # its task waits on nested tasks
    FINISHING = "finishing"  # its task stopped waiting; it gets no new tasks
    SPARE = "spare"          # idle, kept to become active quickly


@dataclasses.dataclass(eq=False)
class ProcessorHandle:
    """One processor child: started, watched and stopped by the agent, and by nobody else."""

    identity: bytes
    process: subprocess.Popen
    psutil_process: psutil.Process
    slot_path: str
    role: ProcessorRole
    ready: bool = False
    # Frames sent before the processor said hello; delivered once it is connected.
    backlog: list[list[m.Buffer]] = dataclasses.field(default_factory=list)
    # Tasks handed to it and not yet answered, oldest first.
    outstanding: dict[int, None] = dataclasses.field(default_factory=dict)
    # Objects it was given; one that becomes active is sent the rest before any task.
    object_ids: set[bytes] = dataclasses.field(default_factory=set)
    idle_since: float = 0.0
    # The task id last seen in its running-task slot, and since when: for --task-timeout-seconds.
    watched_task_id: int = 0
    watched_since: float = 0.0

    def running_task_id(self) -> int:
        with open(self.slot_path, "rb") as slot:
            return struct.unpack(_RUNNING_TASK_FORMAT, slot.read(struct.calcsize(_RUNNING_TASK_FORMAT)))[0]

    def stop(self) -> None:
        """Stop the processor and every process its tasks started (a pool's workers, say): orphaned,
        those would outlive the worker, loky's for the five minutes of its idle timeout."""
        process = self.process
        try:
            descendants = self.psutil_process.children(recursive=True)  # once orphaned they cannot be found
        except psutil.Error:
            descendants = []
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=_PROCESSOR_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _stop_processes(descendants)


def _stop_processes(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            process.terminate()  # psutil checks it is still the same process, not a reused pid
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(processes, timeout=_PROCESSOR_STOP_SECONDS)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass


class WorkerAgent:
    def __init__(self, config: WorkerConfig, reporter: ReadinessReporter | None = None) -> None:
        self._config = config
        # Our parent (a Cluster) hears "registered" at the welcome, or why we gave up before it.
        self._reporter = reporter or ReadinessReporter(None)
        self._welcomed = False
        self._name = config.name or f"{socket_module.gethostname()}|{os.getpid()}"
        self._identity = f"W|{self._name}|{uuid.uuid4().hex[:8]}".encode()
        self._processors: dict[bytes, ProcessorHandle] = {}
        self._active: ProcessorHandle | None = None
        self._processor_numbers = itertools.count()
        # Kept so that a new processor can be given every object the scheduler thinks we hold.
        self._objects: dict[bytes, m.ObjectPayload] = {}
        self._stop_requested = threading.Event()
        self._heartbeat_sent_at: float | None = None
        self._latency_us = 0
        self._process = psutil.Process()
        self._process.cpu_percent()
        self._work_dir = ""
        self._processor_address = ""
        self._router: zmq.Socket | None = None
        self._scheduler: zmq.Socket | None = None
        # Set again from Welcome, which may ask for more frequent heartbeats.
        self._heartbeat_interval = config.heartbeat_interval_seconds
        # The scheduler's limits on what it reads (Welcome; 0: none).
        self._max_frame_bytes = 0
        self._max_control_frame_bytes = 0

    def stop(self) -> None:
        self._stop_requested.set()

    def run(self, exit_with_parent: int | None = None) -> int:
        """Serve until stopped; returns the exit code: 1 if no scheduler ever welcomed us (or one refused us)."""
        config = self._config
        exit_code = 0
        remove_abandoned_work_directories()
        self._work_dir = make_work_directory()
        context = zmq.Context(io_threads=config.io_threads)
        scheduler = self._scheduler = context.socket(zmq.DEALER)
        router = self._router = context.socket(zmq.ROUTER)
        for socket in (scheduler, router):
            socket.setsockopt(zmq.SNDHWM, 0)
            socket.setsockopt(zmq.RCVHWM, 0)
            socket.setsockopt(zmq.LINGER, 0)
        scheduler.setsockopt(zmq.IDENTITY, self._identity)
        try:
            try:
                curve_keys = PeerKeys.resolve(config.curve_server_key, config.curve_secret_key)
                if curve_keys is not None:
                    secure_peer(scheduler, curve_keys)
            except ValueError as error:
                raise WorkerExit(f"cannot start: {error}", failed=True) from None
            self._processor_address = f"ipc://{os.path.join(self._work_dir, PROCESSOR_SOCKET_NAME)}"
            router.bind(self._processor_address)
            self._active = self._start_processor(ProcessorRole.ACTIVE)
            scheduler.connect(config.address)
            send_message(scheduler, m.Hello(
                role=m.Role.WORKER, name=self._name, hostname=socket_module.gethostname(), pid=os.getpid(),
                capacity=config.task_queue_size,
            ))
            self._loop(scheduler, router, exit_with_parent)
        except WorkerExit as reason:
            logger.log(reason.level, f"Worker[{self._name}]: {reason}")
            if reason.failed:
                exit_code = 1
            if not self._welcomed:
                self._reporter.report(FAILED, f"Worker[{self._name}]: {reason}")
        except BaseException as error:
            if not self._welcomed:
                self._reporter.report(FAILED, f"Worker[{self._name}]: {error!r}")
            raise
        finally:
            self._reporter.close()
            try:
                send_message(scheduler, m.Disconnect(reason="worker exiting"), zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            for handle in list(self._processors.values()):
                handle.stop()
            self._processors.clear()
            router.close(linger=0)
            scheduler.close(linger=100)
            context.term()
            shutil.rmtree(self._work_dir, ignore_errors=True)
        return exit_code

    # ------------------------------------------------------------------------------------------ loop

    def _loop(self, scheduler: zmq.Socket, router: zmq.Socket, exit_with_parent: int | None) -> None:
        config = self._config
        poller = zmq.Poller()
        poller.register(scheduler, zmq.POLLIN)
        poller.register(router, zmq.POLLIN)
        last_heard = time.monotonic()
        last_heartbeat = -math.inf  # not a deadline: the interval can shrink when the welcome comes
        next_check = 0.0
        while not self._stop_requested.is_set():
            events = dict(poller.poll(int(_PROCESSOR_CHECK_SECONDS * 1000)))
            if scheduler in events:
                last_heard = time.monotonic()
                while has_input(scheduler):
                    self._on_scheduler_frames(receive_frames(scheduler))
            if router in events:
                while has_input(router):
                    frames = receive_frames(router)
                    self._on_processor_frames(bytes(frames[0]), frames[1:], scheduler)
            now = time.monotonic()
            if now >= next_check:
                next_check = now + _PROCESSOR_CHECK_SECONDS
                self._check_processors(scheduler)
                if now - last_heard > config.death_timeout_seconds:
                    if not self._welcomed:
                        raise WorkerExit(
                            f"no scheduler answered at {config.address} within {config.death_timeout_seconds:g}s "
                            "(--death-timeout-seconds), exiting: is a scheduler running there, and reachable?",
                            failed=True,
                        )
                    raise WorkerExit(
                        f"no word from the scheduler for {config.death_timeout_seconds:g}s, exiting "
                        f"(--death-timeout-seconds; the scheduler was at {config.address})", level=logging.WARNING,
                    )
                if exit_with_parent is not None and os.getppid() != exit_with_parent:
                    raise WorkerExit("parent process is gone, exiting")
            if now - last_heartbeat >= self._heartbeat_interval:
                last_heartbeat = now
                try:
                    # Never block the loop on it: with no usable connection (one whose handshake fails, say
                    # a CURVE mismatch) zmq would wait for one, and the death timeout could never fire.
                    send_message(scheduler, self._heartbeat(), zmq.NOBLOCK)
                    self._heartbeat_sent_at = now
                except zmq.Again:
                    pass

    # ------------------------------------------------------------------------------------------ scheduler side

    def _on_scheduler_frames(self, frames: list[m.Buffer]) -> None:
        try:
            message = m.decode(frames)
        except m.ProtocolDecodeError as error:
            logger.warning(f"Worker[{self._name}]: dropped an undecodable message from the scheduler: {error}")
            return
        if isinstance(message, m.TaskSubmission):
            active = self._active_processor()
            for item in message.objects:
                self._objects[item.object_id] = item
                active.object_ids.add(item.object_id)
            for group in message.groups:
                active.outstanding.update(dict.fromkeys(group.task_ids))
            self._deliver(active, frames)
        elif isinstance(message, m.CancelTasks):
            if message.force:
                self._stop_running(set(message.task_ids))
            else:
                self._refuse_running(set(message.task_ids))
            self._deliver_to_all(frames, message.task_ids)
        elif isinstance(message, m.ReleaseTasks):
            self._deliver_to_all(frames, message.task_ids)
        elif isinstance(message, m.TaskStarted):
            # The go-ahead for a suspect task: to the processor that holds it and waits for it.
            named = set(message.task_ids)
            for handle in self._processors.values():
                if not named.isdisjoint(handle.outstanding):
                    self._deliver(handle, frames)
        elif isinstance(message, m.DeleteObjects):
            for object_id in message.object_ids:
                self._objects.pop(object_id, None)
            for handle in self._processors.values():
                handle.object_ids.difference_update(message.object_ids)
                self._deliver(handle, frames)
        elif isinstance(message, m.Welcome):
            self._heartbeat_interval = message.heartbeat_interval_for(self._config.heartbeat_interval_seconds)
            self._max_frame_bytes = message.max_frame_bytes
            self._max_control_frame_bytes = message.max_control_frame_bytes
            logger.info(f"Worker[{self._name}]: connected to the scheduler")
            if not self._welcomed:
                self._welcomed = True
                self._reporter.report(REGISTERED, self._name)
                self._reporter.close()
        elif isinstance(message, m.HeartbeatEcho):
            if self._heartbeat_sent_at is not None:
                self._latency_us = int((time.monotonic() - self._heartbeat_sent_at) * 1e6)
                self._heartbeat_sent_at = None
        elif isinstance(message, m.Disconnect):
            raise WorkerExit(f"scheduler asked us to leave: {message.reason}")
        elif isinstance(message, m.Refused):
            # Before the welcome it is why we cannot work at all; after it, a restarted scheduler not knowing us.
            raise WorkerExit(f"scheduler refused us: {message.reason}", failed=not self._welcomed,
                             level=logging.WARNING)
        elif isinstance(message, m.ProtocolError):
            logger.warning(f"Worker[{self._name}]: scheduler reports a protocol error: {message.reason}")

    # ------------------------------------------------------------------------------------------ processor side

    def _on_processor_frames(self, identity: bytes, frames: list[m.Buffer], scheduler: zmq.Socket) -> None:
        handle = self._processors.get(identity)
        if handle is None:
            return  # a processor we already gave up on
        message = m.decode(frames)
        if isinstance(message, m.TaskSubmission):
            # A processor waiting on nested tasks hands its queue to the one that serves now.
            active = self._active_processor()
            for group in message.groups:
                for task_id in group.task_ids:
                    handle.outstanding.pop(task_id, None)
                    active.outstanding[task_id] = None
            self._deliver(active, frames)
        elif isinstance(message, m.TaskResults):
            for task_id in message.succeeded_ids:
                handle.outstanding.pop(task_id, None)
            for failure in message.failures:
                handle.outstanding.pop(failure.task_id, None)
            if self._fits(frames):
                send_frames(scheduler, frames)
            else:
                self._send_results_in_limits(message, scheduler)
            if handle.role is ProcessorRole.FINISHING and not handle.outstanding:
                self._retire(handle)
        elif isinstance(message, m.TaskStarted):
            send_frames(scheduler, frames)  # a suspect task asks to start; the scheduler answers
        elif isinstance(message, m.Hello):
            handle.ready = True
            for backlog_frames in handle.backlog:
                self._send_to(handle, backlog_frames)
            handle.backlog.clear()
        elif isinstance(message, m.ProcessorState):
            self._on_processor_state(handle, message)

    def _fits(self, frames: list[m.Buffer]) -> bool:
        """Whether the scheduler will read these frames: over its limits, ZeroMQ or it would drop them unread."""
        frame_limit, control_limit = self._max_frame_bytes, self._max_control_frame_bytes
        if control_limit and len(frames[0]) > control_limit:
            return False
        return not frame_limit or max(map(len, frames)) <= frame_limit

    def _send_results_in_limits(self, results: m.TaskResults, scheduler: zmq.Socket) -> None:
        """Results too large to send as they are: a result over the frame limit becomes its task's failure
        (PayloadTooLargeError; the task is not retried), and the rest go in as many messages as needed."""
        frame_limit = self._max_frame_bytes
        budget = self._max_control_frame_bytes // 2 if self._max_control_frame_bytes else sys.maxsize
        profiles = {profile.task_id: profile for profile in results.profiles}
        # A task's warnings go in the message that carries its outcome.
        warnings_by_task: dict[int, list[m.TaskWarning]] = {}
        for warning in results.warnings:
            warnings_by_task.setdefault(warning.task_id, []).append(warning)
        failures = list(results.failures)
        successes = []
        for task_id, payload in zip(results.succeeded_ids, results.payloads):
            if frame_limit and len(payload) > frame_limit:
                text = (
                    f"the result is {len(payload):,} bytes, over the scheduler's limit of {frame_limit:,} bytes per "
                    "frame (--max-message-size-bytes); return less, or store it elsewhere and return its location"
                )
                failures.append(m.TaskFailure(
                    task_id=task_id, kind=m.FailureKind.RAISED, type_name="scaler.errors.PayloadTooLargeError",
                    message=text, exception=cloudpickle.dumps(PayloadTooLargeError(text)),
                ))
            else:
                successes.append((task_id, payload))
        logger.warning(
            f"Worker[{self._name}]: results over the scheduler's limits; {len(failures) - len(results.failures)} "
            f"failed as too large, the rest sent in parts"
        )
        batch = m.TaskResults(succeeded_ids=[], payloads=[], failures=[])
        inline = 0

        def send_batch() -> None:
            nonlocal batch, inline
            if batch.succeeded_ids or batch.failures:
                send_message(scheduler, batch)
            batch, inline = m.TaskResults(succeeded_ids=[], payloads=[], failures=[]), 0

        def warnings_of(task_id: int) -> tuple[list[m.TaskWarning], int]:
            task_warnings = warnings_by_task.pop(task_id, [])
            return task_warnings, sum(len(w.message) + len(w.filename) + len(w.category) for w in task_warnings)

        for task_id, payload in successes:
            task_warnings, warnings_size = warnings_of(task_id)
            size = m.inline_bytes((payload,)) + warnings_size
            if inline + size > budget:
                send_batch()
            inline += size
            batch.succeeded_ids.append(task_id)
            batch.payloads.append(payload)
            batch.warnings.extend(task_warnings)
            if task_id in profiles:
                batch.profiles.append(profiles[task_id])
        for failure in failures:
            task_warnings, warnings_size = warnings_of(failure.task_id)
            size = len(failure.message) + len(failure.traceback) + len(failure.exception) + warnings_size
            if inline + size > budget:
                send_batch()
            inline += size
            batch.failures.append(failure)
            batch.warnings.extend(task_warnings)
        send_batch()

    def _on_processor_state(self, handle: ProcessorHandle, state: m.ProcessorState) -> None:
        if not state.blocked:
            if handle.role is ProcessorRole.BLOCKED:
                handle.role = ProcessorRole.FINISHING
                if not handle.outstanding:
                    self._retire(handle)
            return
        busy = sum(1 for other in self._processors.values() if other.role is not ProcessorRole.SPARE)
        if busy >= self._config.max_processors:
            self._deliver(handle, m.encode(m.ProcessorState(
                blocked=True, granted=False,
                reason=(
                    f"worker {self._name} already runs {busy} processors, {busy - 1} of them waiting on nested "
                    f"tasks (--max-processors {self._config.max_processors}); nest less deeply or raise the limit"
                ),
            )))
            return
        # It hands its queue over right after our answer; only the waiting task stays with it.
        handle.role = ProcessorRole.BLOCKED
        logger.debug(
            f"Worker[{self._name}]: processor {handle.identity.decode()} waits on nested tasks; "
            f"{busy} busy processor(s), roles {[h.role.value for h in self._processors.values()]}"
        )
        if self._active is handle:
            self._active = None
            self._active_processor()
        self._deliver(handle, m.encode(m.ProcessorState(blocked=True, granted=True)))
        # Nested waits come in runs: have the next processor started before it is needed.
        if busy + 1 < self._config.max_processors and not any(
            other.role is ProcessorRole.SPARE for other in self._processors.values()
        ):
            self._retire(self._start_processor(ProcessorRole.SPARE))

    def _active_processor(self) -> ProcessorHandle:
        if self._active is None:
            spare = next((h for h in self._processors.values() if h.role is ProcessorRole.SPARE), None)
            if spare is not None:
                spare.role = ProcessorRole.ACTIVE
                self._give_missing_objects(spare)
                self._active = spare
            else:
                self._active = self._start_processor(ProcessorRole.ACTIVE)
        return self._active

    def _retire(self, handle: ProcessorHandle) -> None:
        handle.role = ProcessorRole.SPARE
        handle.idle_since = time.monotonic()

    def _trim_spares(self) -> None:
        spares = sorted(
            (h for h in self._processors.values() if h.role is ProcessorRole.SPARE), key=lambda h: h.idle_since
        )
        now = time.monotonic()
        for handle in spares[1:]:
            if now - handle.idle_since > _SPARE_IDLE_SECONDS:
                self._remove_processor(handle)

    def _start_processor(self, role: ProcessorRole) -> ProcessorHandle:
        number = next(self._processor_numbers)
        slot_path = os.path.join(self._work_dir, f"running_task_{number}")
        with open(slot_path, "wb") as slot:
            slot.write(b"\0" * struct.calcsize(_RUNNING_TASK_FORMAT))
        identity = f"P{number}"
        process = subprocess.Popen(
            [sys.executable, "-m", "scaler.worker.processor", self._processor_address, identity, slot_path,
             str(os.getpid())],
            stdin=subprocess.DEVNULL,
        )
        handle = ProcessorHandle(
            identity=identity.encode(), process=process, psutil_process=psutil.Process(process.pid),
            slot_path=slot_path, role=role,
        )
        handle.psutil_process.cpu_percent()
        self._processors[handle.identity] = handle
        self._give_missing_objects(handle)
        return handle

    def _give_missing_objects(self, handle: ProcessorHandle) -> None:
        missing = [item for object_id, item in self._objects.items() if object_id not in handle.object_ids]
        if missing:
            self._deliver(handle, m.encode(m.TaskSubmission(objects=missing, groups=[])))
            handle.object_ids.update(item.object_id for item in missing)

    def _remove_processor(self, handle: ProcessorHandle) -> None:
        self._processors.pop(handle.identity, None)
        if self._active is handle:
            self._active = None
        handle.stop()
        try:
            os.unlink(handle.slot_path)
        except OSError:
            pass

    def _deliver_to_all(self, frames: list[m.Buffer], task_ids: list[int]) -> None:
        """A cancel or release goes to every processor; one busy with a task is signalled to read it now.

        A processor reads its socket between tasks; the signal makes it answer for the tasks queued
        behind a long one at once (see Processor._on_agent_signal).
        """
        named = set(task_ids)
        for handle in self._processors.values():
            self._deliver(handle, frames)
            queued_here = named.intersection(handle.outstanding)
            if not handle.ready or not queued_here:
                continue
            running = handle.running_task_id()
            if running in handle.outstanding and queued_here != {running}:
                try:
                    os.kill(handle.process.pid, AGENT_SIGNAL)
                except OSError:
                    pass  # it is gone; the check of processors reports it

    def _deliver(self, handle: ProcessorHandle, frames: list[m.Buffer]) -> None:
        if handle.ready:
            self._send_to(handle, frames)
        else:
            handle.backlog.append(frames)

    def _send_to(self, handle: ProcessorHandle, frames: list[m.Buffer]) -> None:
        assert self._router is not None
        send_frames(self._router, [handle.identity, *frames])

    def _check_processors(self, scheduler: zmq.Socket) -> None:
        for handle in [h for h in self._processors.values() if h.process.poll() is not None]:
            exit_code = handle.process.poll()
            self._stop_processor(handle, scheduler, m.FailureKind.WORKER_DIED, "scaler.errors.WorkerDiedError",
                                 f"the processor running this task died (exit code {exit_code})")
        self._enforce_limits(scheduler)
        self._trim_spares()

    def _enforce_limits(self, scheduler: zmq.Socket) -> None:
        """Stop a processor whose task runs too long or whose memory grows too large, before the OS does."""
        config = self._config
        if config.task_timeout_seconds <= 0 and config.memory_limit_bytes <= 0:
            return
        now = time.monotonic()
        for handle in list(self._processors.values()):
            running = handle.running_task_id()
            if running != handle.watched_task_id:
                handle.watched_task_id, handle.watched_since = running, now
            if running not in handle.outstanding:
                continue
            if config.task_timeout_seconds > 0 and now - handle.watched_since > config.task_timeout_seconds:
                self._stop_processor(handle, scheduler, m.FailureKind.RAISED, "scaler.errors.TaskTimeoutError",
                                     f"the task ran longer than {config.task_timeout_seconds:g}s "
                                     "(--task-timeout-seconds) and was stopped", TaskTimeoutError)
                continue
            if config.memory_limit_bytes > 0:
                try:
                    rss = handle.psutil_process.memory_info().rss
                except psutil.Error:
                    continue
                if rss > config.memory_limit_bytes:
                    self._stop_processor(handle, scheduler, m.FailureKind.RAISED, "scaler.errors.MemoryLimitError",
                                         f"its processor used {rss:,} bytes, over the worker's limit of "
                                         f"{config.memory_limit_bytes:,} (--memory-limit-bytes), and was stopped",
                                         MemoryLimitError)

    def _refuse_running(self, task_ids: set[int]) -> None:
        """Say at once which of these tasks have started (a processor's slot names them): cancel cannot stop them."""
        assert self._scheduler is not None
        started = [
            running for running in (handle.running_task_id() for handle in self._processors.values())
            if running in task_ids and any(running in h.outstanding for h in self._processors.values())
        ]
        if started:
            send_message(self._scheduler, m.CancelRefused(task_ids=started))

    def _stop_running(self, task_ids: set[int]) -> None:
        """Force-cancel: a processor running one of these tasks is stopped; the task ends canceled."""
        assert self._scheduler is not None
        for handle in list(self._processors.values()):
            running = handle.running_task_id()
            if running in task_ids and running in handle.outstanding:
                self._stop_processor(handle, self._scheduler, m.FailureKind.CANCELED, "", "")

    def _stop_processor(
        self,
        handle: ProcessorHandle,
        scheduler: zmq.Socket,
        kind: m.FailureKind,
        type_name: str,
        message: str,
        error_type: type[Exception] | None = None,
    ) -> None:
        """Stop (or bury) a processor: its running task ends with the given failure, the rest go back untried."""
        handle.stop()
        running = handle.running_task_id()
        failures = []
        for task_id in handle.outstanding:
            if task_id == running:
                exception = cloudpickle.dumps(error_type(message)) if error_type is not None else b""
                failures.append(m.TaskFailure(
                    task_id=task_id, kind=kind, type_name=type_name, message=message, exception=exception
                ))
            else:
                failures.append(m.TaskFailure(task_id=task_id, kind=m.FailureKind.RETURNED))
        logger.warning(
            f"Worker[{self._name}]: processor {handle.identity.decode()} stopped ({message or kind.name.lower()}); "
            f"{len(failures)} task(s) handed back to the scheduler"
        )
        was_active = self._active is handle
        self._remove_processor(handle)
        if was_active:
            self._active_processor()
        if failures:
            send_message(scheduler, m.TaskResults(succeeded_ids=[], payloads=[], failures=failures))

    def _heartbeat(self) -> m.Heartbeat:
        processor_cpu, processor_rss = 0.0, 0
        for handle in self._processors.values():
            try:
                processor_cpu += handle.psutil_process.cpu_percent()
                processor_rss += handle.psutil_process.memory_info().rss
            except psutil.Error:
                pass
        return m.Heartbeat(
            cpu_percent=self._process.cpu_percent(),
            rss_bytes=self._process.memory_info().rss,
            queued_tasks=sum(len(handle.outstanding) for handle in self._processors.values()),
            processor_cpu_percent=processor_cpu,
            processor_rss_bytes=processor_rss,
            latency_us=self._latency_us,
        )


def run_worker(
    config: WorkerConfig, exit_with_parent: int | None = None, reporter: ReadinessReporter | None = None
) -> int:
    agent = WorkerAgent(config, reporter)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: agent.stop())
    return agent.run(exit_with_parent=exit_with_parent)


def main() -> None:
    """Entry point of one worker process, started by a Cluster with its config as JSON."""
    import json

    from scaler.utility.logging_setup import setup_logging
    from scaler.utility.parent_watch import exit_with_parent_pid

    reporter = ReadinessReporter.from_environment()
    fields = json.loads(sys.argv[1])
    fields["logging_paths"] = tuple(fields["logging_paths"])
    config = WorkerConfig(**{field.name: fields[field.name] for field in dataclasses.fields(WorkerConfig)})
    setup_logging(config.logging_paths, config.logging_level, config.logging_config_file)
    sys.exit(run_worker(config, exit_with_parent=exit_with_parent_pid(), reporter=reporter))


if __name__ == "__main__":
    main()
