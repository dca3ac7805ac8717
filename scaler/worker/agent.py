"""The worker agent process: the I/O shell around the agent core (agent_core.py), which decides everything.

The shell holds the link to the scheduler (scheduler_link.py: libzmq's DEALER, or ZMTP spoken by this thread) and a
socketpair with each processor (frame_stream.py: no zmq I/O threads on that link), starts and stops the processor
processes, maps their running-task slots, measures CPU and memory, and runs the loop: each message and each
processor exit goes to the core as an event, a tick goes every 0.1 s, and the shell carries out whatever the core
answers, in order. A processor's link never blocks the loop: what it does not take at once is written when it is
writable.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import socket as socket_module
import subprocess
import sys
import time

import psutil
import zmq

from scaler.protocol import messages as m
from scaler.utility.fd_poller import FdPoller
from scaler.utility.frame_stream import FrameStream
from scaler.utility.loop_stop import LoopStop
from scaler.utility.malloc_tuning import with_freed_memory_kept
from scaler.utility.parent_watch import parent_is_gone
from scaler.utility.process_stop import stop_process_trees
from scaler.utility.readiness import FAILED, REGISTERED, ReadinessReporter
from scaler.utility.scheduler_address import TASK_SCHEDULER_ENVIRONMENT_VARIABLE
from scaler.utility.zmq_util import POLL_IN, POLL_OUT
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
from scaler.worker.agent_signal import AGENT_SIGNAL
from scaler.worker.config import WorkerConfig
from scaler.worker.running_task_slot import NO_TASK, RunningTaskSlot, create_slot
from scaler.worker.scheduler_link import LinkStuck, SchedulerLink, open_scheduler_link
from scaler.worker.work_directory import make_work_directory, remove_abandoned_work_directories

logger = logging.getLogger(__name__)

_TICK_SECONDS = 0.1
_PROCESSOR_STOP_SECONDS = 3.0
# A processor gives up on a living agent that takes none of its messages this long after the agent's own longest
# wait (a send to the scheduler, bounded by the death timeout): such an agent is stuck, not busy.
_PROCESSOR_LINK_GRACE_SECONDS = 30.0


class WorkerExit(Exception):
    """Raised inside the loop to leave it with a reason for the log, at `level`; `failed` also makes the
    process exit with status 1 (a worker that never got a word from its scheduler has not done its job)."""

    def __init__(self, reason: str, failed: bool = False, level: int = logging.INFO) -> None:
        super().__init__(reason)
        self.failed = failed
        self.level = level


@dataclasses.dataclass(eq=False)
class ProcessorProcess:
    """One processor child: started, watched and stopped by the agent, and by nobody else."""

    process: subprocess.Popen
    psutil_process: psutil.Process
    slot: RunningTaskSlot
    slot_path: str
    link: FrameStream
    # Whether the loop's poller waits for the link to be writable (it has frames the socket did not take yet).
    polled_for_output: bool = False


class WorkerAgent:
    def __init__(self, config: WorkerConfig, reporter: ReadinessReporter | None = None) -> None:
        self._config = config
        # Our parent (a Cluster) hears "registered" at the welcome, or why we gave up before it.
        self._reporter = reporter or ReadinessReporter(None)
        self._welcomed = False
        self._name = config.name or f"{socket_module.gethostname()}|{os.getpid()}"
        self._identity = f"W|{self._name}|{os.urandom(4).hex()}".encode()
        self._core = WorkerAgentCore(config, self._name, socket_module.gethostname(), os.getpid(), self)
        self._processes: dict[bytes, ProcessorProcess] = {}
        # The processors' links by file descriptor, as the poller reports them; a link that reached its end leaves.
        self._links: dict[int, bytes] = {}
        # A zmq socket's poller while the scheduler link is libzmq's; run() takes a plain one for a ZMTP link.
        self._poller: zmq.Poller | FdPoller = zmq.Poller()
        self._next_tick = 0.0
        # A SIGTERM ends the loop's wait at once, not at its next tick (the scheduler's and store's loops do the same).
        self._stop = LoopStop()
        self._process = psutil.Process()
        self._process.cpu_percent()
        self._work_dir = ""
        self._scheduler: SchedulerLink | None = None

    def stop(self) -> None:
        self._stop.request()

    def running_task_id(self, identity: bytes) -> int:
        """The core's view of the running-task slots (agent_actions.RunningTasks)."""
        process = self._processes.get(identity)
        return process.slot.read() if process is not None else NO_TASK

    def run(self, exit_with_parent: int | None = None) -> int:
        """Serve until stopped; returns the exit code: 1 if no scheduler ever welcomed us (or one refused us)."""
        config = self._config
        exit_code = 0
        remove_abandoned_work_directories()
        self._work_dir = make_work_directory()
        try:
            try:
                # libzmq's DEALER, or ZMTP spoken by this thread (SCALER_WORKER_TRANSPORT=zmtp, scheduler_link.py).
                scheduler = self._scheduler = open_scheduler_link(
                    config, self._identity, self._core.addresses.current, time.monotonic()
                )
            except ValueError as error:
                raise WorkerExit(f"cannot start: {error}", failed=True, level=logging.ERROR) from None
            # Ahead of the processors' links: its messages are read first.
            pollable = scheduler.pollable
            if isinstance(pollable, int):
                self._poller = FdPoller()  # no zmq socket to watch: one poll a wait, not zmq_poll's two (fd_poller.py)
                self._poller.register(pollable, POLL_IN)
            else:
                assert isinstance(self._poller, zmq.Poller)
                self._poller.register(pollable, POLL_IN)
            self._carry_out(self._core.start(time.monotonic()))
            self._stop.open()
            try:
                self._loop(scheduler, exit_with_parent)
            except LinkStuck as stuck:  # by then its ticks have named what the handshakes said
                raise WorkerExit(str(stuck), failed=True, level=logging.ERROR) from None
            finally:
                self._stop.close()
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
            if self._scheduler is not None:
                self._scheduler.close(m.encode(m.Disconnect(reason="worker exiting")))
            self._stop_processors(list(self._processes))
            shutil.rmtree(self._work_dir, ignore_errors=True)
        return exit_code

    # ------------------------------------------------------------------------------------------ loop

    def _loop(self, scheduler: SchedulerLink, exit_with_parent: int | None) -> None:
        core = self._core
        poller = self._poller
        poller.register(self._stop.fileno(), POLL_IN)
        pollable = scheduler.pollable
        while not self._stop.requested:
            # What the last tick queued for the scheduler goes out (the ZMTP link writes at a flush, in one write
            # per flush; zmq's I/O thread has sent it already).
            scheduler.flush()
            events = poller.poll(int(_TICK_SECONDS * 1000))
            now = time.monotonic()
            for source, flags in events:
                if source is pollable:
                    for frames in scheduler.receive(now):
                        self._carry_out(core.on_scheduler_frames(frames, now))
                else:
                    identity = self._links.get(source)  # type: ignore[call-overload]
                    if identity is not None:
                        self._serve_link(identity, flags, now)
            scheduler.flush()  # before the tick's work (its usage figures take a while every heartbeat)
            now = time.monotonic()
            # Stopped, no tick: a processor that exited now got the same SIGTERM (a Slurm cancel signals every
            # process of the job at once); its task is not to blame, and the goodbye hands it back with the rest.
            if now < self._next_tick or self._stop.requested:
                continue
            self._next_tick = now + _TICK_SECONDS
            for problem in scheduler.tick(now):
                logger.error(f"Worker[{self._name}]: {problem}")
            for identity, process in list(self._processes.items()):
                exit_code = process.process.poll()
                if exit_code is not None:
                    self._carry_out(core.on_processor_exit(identity, exit_code, now))
            processor_rss = self._processor_rss() if core.watches_memory else None
            usage = self._usage() if core.heartbeat_due(now) else None
            self._carry_out(core.on_tick(now, processor_rss, usage))
            if parent_is_gone(exit_with_parent):
                raise WorkerExit("parent process is gone, exiting")

    def _serve_link(self, identity: bytes, flags: int, now: float) -> None:
        """A processor's link is readable, writable, or at its end (which polls as readable)."""
        link = self._processes[identity].link
        if flags & POLL_OUT:
            link.flush()
            self._poll_link(self._processes[identity])
        for frames in link.receive_available():
            self._carry_out(self._core.on_processor_frames(identity, frames, now))
        if link.closed and link.fileno() in self._links:
            # The processor exited (or closed its end): the tick tells the core now, with its exit code, rather
            # than at its next turn. A process its task started may hold the link open: then the tick finds it.
            self._forget_link(link)
            self._next_tick = 0.0

    def _poll_link(self, process: ProcessorProcess) -> None:
        """Poll for a link's writability exactly while it has frames waiting."""
        wants = process.link.wants_to_write
        if wants != process.polled_for_output and process.link.fileno() in self._links:
            process.polled_for_output = wants
            self._poller.modify(process.link.fileno(), POLL_IN | POLL_OUT if wants else POLL_IN)

    def _forget_link(self, link: FrameStream) -> None:
        if self._links.pop(link.fileno(), None) is not None:
            self._poller.unregister(link.fileno())

    def _carry_out(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, ToProcessor):
                process = self._processes[action.identity]
                process.link.send(action.frames)
                if process.link.wants_to_write != process.polled_for_output:
                    self._poll_link(process)
            elif isinstance(action, ToScheduler):
                assert self._scheduler is not None
                self._scheduler.send(action.frames, action.may_drop)
            elif isinstance(action, SignalProcessor):
                process = self._processes[action.identity]
                process.slot.announce_urgent_sent(action.urgent_sent)
                try:
                    os.kill(process.process.pid, AGENT_SIGNAL)
                except OSError:
                    pass  # it is gone; the next tick reports its exit
            elif isinstance(action, StartProcessor):
                self._start_processor(action.identity)
            elif isinstance(action, StopProcessor):
                self._stop_processor(action.identity)
            elif isinstance(action, Reconnect):
                assert self._scheduler is not None
                self._scheduler.reconnect(action.address, time.monotonic())
            elif isinstance(action, Registered):
                self._welcomed = True
                self._reporter.report(REGISTERED, self._name)
                self._reporter.close()
            elif isinstance(action, Exit):
                problem = self._scheduler.problem if self._scheduler is not None else ""
                if problem and not self._welcomed:  # the core saw silence; the handshakes say why
                    raise WorkerExit(
                        f"no usable connection to the scheduler within {self._config.death_timeout_seconds:g}s "
                        f"(--death-timeout-seconds), exiting: {problem}", action.failed, action.level,
                    )
                raise WorkerExit(action.reason, action.failed, action.level)

    # ------------------------------------------------------------------------------------------ processes

    def _start_processor(self, identity: bytes) -> None:
        slot_path = os.path.join(self._work_dir, f"running_task_{identity.decode()}")
        create_slot(slot_path)
        ours, theirs = socket_module.socketpair()
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "scaler.worker.processor", str(theirs.fileno()), identity.decode(), slot_path,
                 str(os.getpid()), repr(self._config.input_wait_seconds),
                 repr(self._config.death_timeout_seconds + _PROCESSOR_LINK_GRACE_SECONDS)],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                # A Client() made by a task finds the scheduler the task came from (utility/scheduler_address.py).
                env={**with_freed_memory_kept(os.environ), TASK_SCHEDULER_ENVIRONMENT_VARIABLE: self._config.address},
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the processor's now: its exit is the end of our stream
        psutil_process = psutil.Process(process.pid)
        psutil_process.cpu_percent()
        link = FrameStream(ours)
        self._processes[identity] = ProcessorProcess(
            process, psutil_process, RunningTaskSlot(slot_path), slot_path, link
        )
        self._links[link.fileno()] = identity
        self._poller.register(link.fileno(), POLL_IN)

    def _stop_processor(self, identity: bytes) -> None:
        self._stop_processors([identity])

    def _stop_processors(self, identities: list[bytes]) -> None:
        """Together, with one grace for all: one after another, an agent with several busy processors took longer
        to stop than its cluster waits for it (cluster.py), and was killed before it cleaned up."""
        processes = [self._processes.pop(identity) for identity in identities]
        stop_process_trees([process.process for process in processes], _PROCESSOR_STOP_SECONDS)
        for process in processes:
            self._forget_link(process.link)
            process.link.close()
            process.slot.close()
            try:
                os.unlink(process.slot_path)
            except OSError:
                pass

    def _processor_rss(self) -> dict[bytes, int]:
        rss = {}
        for identity, process in self._processes.items():
            try:
                rss[identity] = process.psutil_process.memory_info().rss
            except psutil.Error:
                pass  # gone: the next tick reports its exit
        return rss

    def _usage(self) -> m.Heartbeat:
        """The CPU and memory figures of a heartbeat; the core fills in the rest."""
        processor_cpu, processor_rss = 0.0, 0
        for process in self._processes.values():
            try:
                processor_cpu += process.psutil_process.cpu_percent()
                processor_rss += process.psutil_process.memory_info().rss
            except psutil.Error:
                pass
        return m.Heartbeat(
            cpu_percent=self._process.cpu_percent(), rss_bytes=self._process.memory_info().rss,
            processor_cpu_percent=processor_cpu, processor_rss_bytes=processor_rss,
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
