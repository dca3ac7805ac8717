"""The worker agent: the I/O shell between the scheduler and one processor process.

It registers with the scheduler, forwards task batches to its processor and results back (without
re-encoding them), heartbeats with its own and the processor's CPU and memory, and replaces the
processor when it crashes, blaming only the task that was running.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket as socket_module
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import psutil
import zmq

from scaler.protocol import messages as m
from scaler.utility.zmq_util import has_input, receive_frames, send_frames, send_message
from scaler.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

_RUNNING_TASK_FORMAT = "<Q"
_PROCESSOR_CHECK_SECONDS = 0.1
_PROCESSOR_STOP_SECONDS = 3.0


class WorkerExit(Exception):
    """Raised inside the loop to leave it with a reason for the log."""


class _ProcessorHandle:
    """The processor child: started, watched and stopped by the agent, and by nobody else."""

    def __init__(self, work_dir: str, context: zmq.Context) -> None:
        self._slot_path = os.path.join(work_dir, "running_task")
        with open(self._slot_path, "wb") as slot:
            slot.write(b"\0" * struct.calcsize(_RUNNING_TASK_FORMAT))
        self.socket = context.socket(zmq.PAIR)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.address = f"ipc://{os.path.join(work_dir, 'processor.sock')}"
        self.socket.bind(self.address)
        self.process: subprocess.Popen | None = None
        self.psutil_process: psutil.Process | None = None

    def start(self) -> None:
        with open(self._slot_path, "wb") as slot:
            slot.write(b"\0" * struct.calcsize(_RUNNING_TASK_FORMAT))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "scaler.worker.processor", self.address, self._slot_path, str(os.getpid())],
            stdin=subprocess.DEVNULL,
        )
        self.psutil_process = psutil.Process(self.process.pid)
        self.psutil_process.cpu_percent()

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def running_task_id(self) -> int:
        with open(self._slot_path, "rb") as slot:
            return struct.unpack(_RUNNING_TASK_FORMAT, slot.read(struct.calcsize(_RUNNING_TASK_FORMAT)))[0]

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            try:
                send_message(self.socket, m.Disconnect(reason="worker stopping"), zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            try:
                process.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(timeout=_PROCESSOR_STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.process = None

    def close(self) -> None:
        self.stop()
        self.socket.close(linger=0)


class WorkerAgent:
    def __init__(self, config: WorkerConfig) -> None:
        self._config = config
        self._name = config.name or f"{socket_module.gethostname()}|{os.getpid()}"
        self._identity = f"W|{self._name}|{uuid.uuid4().hex[:8]}".encode()
        # Tasks handed to the processor and not yet answered, oldest first.
        self._outstanding: dict[int, None] = {}
        # Kept so that a replacement processor can be given every object the scheduler thinks we hold.
        self._objects: dict[bytes, m.ObjectPayload] = {}
        self._stop_requested = threading.Event()
        self._heartbeat_sent_at: float | None = None
        self._latency_us = 0
        self._process = psutil.Process()
        self._process.cpu_percent()

    def stop(self) -> None:
        self._stop_requested.set()

    def run(self, exit_with_parent: int | None = None) -> None:
        config = self._config
        work_dir = tempfile.mkdtemp(prefix="scaler-worker-")
        context = zmq.Context(io_threads=config.io_threads)
        scheduler = context.socket(zmq.DEALER)
        scheduler.setsockopt(zmq.IDENTITY, self._identity)
        scheduler.setsockopt(zmq.SNDHWM, 0)
        scheduler.setsockopt(zmq.RCVHWM, 0)
        scheduler.setsockopt(zmq.LINGER, 0)
        processor: _ProcessorHandle | None = None
        try:
            processor = _ProcessorHandle(work_dir, context)
            processor.start()
            scheduler.connect(config.address)
            send_message(scheduler, m.Hello(
                role=m.Role.WORKER, name=self._name, hostname=socket_module.gethostname(), pid=os.getpid(),
                capacity=config.task_queue_size,
            ))
            self._loop(scheduler, processor, exit_with_parent)
        except WorkerExit as reason:
            logger.info(f"Worker[{self._name}]: {reason}")
        finally:
            try:
                send_message(scheduler, m.Disconnect(reason="worker exiting"), zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
            if processor is not None:
                processor.close()
            scheduler.close(linger=100)
            context.term()
            shutil.rmtree(work_dir, ignore_errors=True)

    def _loop(self, scheduler: zmq.Socket, processor: _ProcessorHandle, exit_with_parent: int | None) -> None:
        config = self._config
        poller = zmq.Poller()
        poller.register(scheduler, zmq.POLLIN)
        poller.register(processor.socket, zmq.POLLIN)
        last_heard = time.monotonic()
        next_heartbeat = 0.0
        next_check = 0.0
        while not self._stop_requested.is_set():
            events = dict(poller.poll(int(_PROCESSOR_CHECK_SECONDS * 1000)))
            if scheduler in events:
                last_heard = time.monotonic()
                while has_input(scheduler):
                    self._on_scheduler_frames(receive_frames(scheduler), processor)
            if processor.socket in events:
                while has_input(processor.socket):
                    frames = receive_frames(processor.socket)
                    self._on_processor_results(frames)
                    send_frames(scheduler, frames)
            now = time.monotonic()
            if now >= next_check:
                next_check = now + _PROCESSOR_CHECK_SECONDS
                if processor.exit_code() is not None:
                    self._replace_processor(scheduler, processor)
                if now - last_heard > config.death_timeout_seconds:
                    raise WorkerExit(f"no word from the scheduler for {config.death_timeout_seconds:g}s, exiting")
                if exit_with_parent is not None and os.getppid() != exit_with_parent:
                    raise WorkerExit("parent process is gone, exiting")
            if now >= next_heartbeat:
                next_heartbeat = now + config.heartbeat_interval_seconds
                send_message(scheduler, self._heartbeat(processor))
                self._heartbeat_sent_at = now

    def _on_scheduler_frames(self, frames: list[m.Buffer], processor: _ProcessorHandle) -> None:
        try:
            message = m.decode(frames)
        except m.ProtocolDecodeError as error:
            logger.warning(f"Worker[{self._name}]: dropped an undecodable message from the scheduler: {error}")
            return
        if isinstance(message, m.TaskSubmission):
            for item in message.objects:
                self._objects[item.object_id] = item
            for group in message.groups:
                self._outstanding.update(dict.fromkeys(group.task_ids))
            send_frames(processor.socket, frames)
        elif isinstance(message, (m.CancelTasks,)):
            send_frames(processor.socket, frames)
        elif isinstance(message, m.DeleteObjects):
            for object_id in message.object_ids:
                self._objects.pop(object_id, None)
            send_frames(processor.socket, frames)
        elif isinstance(message, m.Welcome):
            logger.info(f"Worker[{self._name}]: connected to the scheduler")
        elif isinstance(message, m.HeartbeatEcho):
            if self._heartbeat_sent_at is not None:
                self._latency_us = int((time.monotonic() - self._heartbeat_sent_at) * 1e6)
                self._heartbeat_sent_at = None
        elif isinstance(message, m.Disconnect):
            raise WorkerExit(f"scheduler asked us to leave: {message.reason}")
        elif isinstance(message, m.Refused):
            raise WorkerExit(f"scheduler refused us: {message.reason}")
        elif isinstance(message, m.ProtocolError):
            logger.warning(f"Worker[{self._name}]: scheduler reports a protocol error: {message.reason}")

    def _on_processor_results(self, frames: list[m.Buffer]) -> None:
        results = m.decode(frames)
        assert isinstance(results, m.TaskResults)
        outstanding = self._outstanding
        for task_id in results.succeeded_ids:
            outstanding.pop(task_id, None)
        for failure in results.failures:
            outstanding.pop(failure.task_id, None)

    def _replace_processor(self, scheduler: zmq.Socket, processor: _ProcessorHandle) -> None:
        exit_code = processor.exit_code()
        crashed_id = processor.running_task_id()
        failures = []
        for task_id in self._outstanding:
            if task_id == crashed_id:
                failures.append(m.TaskFailure(
                    task_id=task_id, kind=m.FailureKind.WORKER_DIED, type_name="scaler.errors.WorkerDiedError",
                    message=f"the processor running this task died (exit code {exit_code})",
                ))
            else:
                failures.append(m.TaskFailure(task_id=task_id, kind=m.FailureKind.RETURNED))
        logger.warning(
            f"Worker[{self._name}]: processor died with exit code {exit_code}; "
            f"{len(failures)} task(s) handed back to the scheduler, starting a new processor"
        )
        self._outstanding.clear()
        processor.stop()
        processor.start()
        if self._objects:
            send_message(processor.socket, m.TaskSubmission(objects=list(self._objects.values()), groups=[]))
        if failures:
            send_message(scheduler, m.TaskResults(succeeded_ids=[], payloads=[], failures=failures))

    def _heartbeat(self, processor: _ProcessorHandle) -> m.Heartbeat:
        processor_cpu, processor_rss = 0.0, 0
        if processor.psutil_process is not None:
            try:
                processor_cpu = processor.psutil_process.cpu_percent()
                processor_rss = processor.psutil_process.memory_info().rss
            except psutil.Error:
                pass
        return m.Heartbeat(
            cpu_percent=self._process.cpu_percent(),
            rss_bytes=self._process.memory_info().rss,
            queued_tasks=len(self._outstanding),
            processor_cpu_percent=processor_cpu,
            processor_rss_bytes=processor_rss,
            latency_us=self._latency_us,
        )


def run_worker(config: WorkerConfig, exit_with_parent: int | None = None) -> None:
    agent = WorkerAgent(config)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: agent.stop())
    agent.run(exit_with_parent=exit_with_parent)


def main() -> None:
    """Entry point of one worker process, started by a Cluster with its config as JSON."""
    import dataclasses
    import json

    from scaler.cli.common import exit_with_parent_pid
    from scaler.utility.logging_setup import setup_logging

    fields = json.loads(sys.argv[1])
    fields["logging_paths"] = tuple(fields["logging_paths"])
    config = WorkerConfig(**{field.name: fields[field.name] for field in dataclasses.fields(WorkerConfig)})
    setup_logging(config.logging_paths, config.logging_level, config.logging_config_file)
    run_worker(config, exit_with_parent=exit_with_parent_pid())


if __name__ == "__main__":
    main()
