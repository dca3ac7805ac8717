"""The worker agent's decisions, as a state machine with no I/O.

The shell (agent.py) feeds it events with the time they happened: frames from the scheduler, frames
from a processor, a processor's exit, and a tick every 0.1 s. Each returns the actions to carry out in
order (agent_actions.py): frames to send, processors to start, stop or signal, an exit. No sockets,
processes, clocks or operating-system calls in here, so tests drive it with simulated processors
(tests/unit/agent_harness.py).

What the agent decides: where the scheduler's tasks go (processor_pool.py, with the nested-task
hand-over), which task to blame when a processor dies, runs too long or grows too large, which named
tasks a cancel cannot stop and which force-cancel stops, when a processor must be signalled to read a
cancel or release now, how results over the scheduler's size limits are sent (result_split.py), what a
heartbeat says, when to give up on the scheduler, and how to outlive one that restarts (protocol/scheduler_session.py).

Several decisions need the task a processor is running at that very moment: a cancel or release
arriving from the scheduler, and the blame when a processor is stopped. The slot that says it is
memory shared with the processor (running_task_slot.py), so the core reads it through a read-only view
(RunningTasks) that the shell injects and tests replace with a dict. Carried in the events instead,
the value would be stale by the time of the decision, or cost a read of every slot on every message
(task submissions included) to serve the few that need one.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import random
from typing import Callable, Mapping

from scaler.protocol import messages as m
from scaler.protocol.address_rotation import AddressRotation
from scaler.protocol.heartbeat_pace import HeartbeatPace
from scaler.protocol.scheduler_session import SchedulerSession
from scaler.protocol.versions import refused_by_scheduler
from scaler.utility.host_key import this_host_key
from scaler.utility.scheduler_addresses import parse_scheduler_addresses
from scaler.utility.tags import PYTHON_TAG
from scaler.worker.agent_actions import Action, Exit, Reconnect, Registered, RunningTasks, SignalProcessor, ToScheduler
from scaler.worker.config import WorkerConfig
from scaler.worker.processor_pool import ProcessorPool, ProcessorRecord
from scaler.worker.result_split import SizeLimits, split_results
from scaler.worker.task_limits import over_limits

logger = logging.getLogger(__name__)

# How long a processor's task must have run (seen by two ticks, 0.1 s apart) before the agent asks it for the
# results it still holds of the tasks before it (see _ask_for_held_results).
_HELD_RESULTS_AFTER_SECONDS = 0.05


class WorkerAgentCore:
    def __init__(
        self, config: WorkerConfig, name: str, hostname: str, pid: int, running_tasks: RunningTasks,
        concurrency: int = 1, heartbeat_phase: Callable[[], float] = random.random,
    ) -> None:
        # `concurrency`: how many tasks run at once here (the hello says so, for the scheduler's prefetch). One
        # processor runs one task at a time; the Symphony worker runs its base concurrency.
        self._config = config
        self._name = name
        self._hello = m.Hello(
            role=m.Role.WORKER, name=name, hostname=hostname, pid=pid, capacity=config.task_queue_size,
            tags=tuple(sorted({PYTHON_TAG, *config.tags})), store=config.store_address, host_key=this_host_key(),
            concurrency=concurrency,
        )
        # The stores the scheduler told us of, and our home among them (PROTOCOL.md §17).
        self.store_directory = m.StoreDirectory()
        self._running_tasks = running_tasks
        self._out: list[Action] = []
        self._pool = ProcessorPool(name, config.max_processors, self._out)
        self._welcomed = False
        self._session = SchedulerSession()
        # Which scheduler we talk to, of several (a standby's): the shell connects where it says.
        self.addresses = AddressRotation(parse_scheduler_addresses(config.address), 0.0)
        self._pace = HeartbeatPace(
            config.heartbeat_interval_seconds, config.death_timeout_seconds, self.addresses, heartbeat_phase
        )
        self._last_heard = 0.0
        self._heartbeat_sent_at: float | None = None
        self._latency_us = 0
        self._limits = SizeLimits()
        # The large results of our processors, by the processor that made each: it may not have written it
        # into the store yet (own_results.py), and must before another process reads it.
        self._made_by: dict[bytes, bytes] = {}
        # Force-cancelled tasks a processor holds but had not started: it may start one before it reads the
        # cancel (it took the task from its socket just before), and then a tick stops it (_stop_late_starts).
        self._force_canceled: set[int] = set()
        # Tasks a (not forced) cancel named while they were queued: one that starts before its processor reads
        # the cancel is refused at the next tick (_refuse_late_starts), as it would have been had it started first.
        self._cancel_unread: set[int] = set()

    @property
    def pool(self) -> ProcessorPool:
        return self._pool

    @property
    def watches_memory(self) -> bool:
        """Whether a tick needs the processors' RSS (--memory-limit-bytes is set)."""
        return self._config.memory_limit_bytes > 0

    def heartbeat_due(self, now: float) -> bool:
        """Whether the next tick sends a heartbeat (then it needs the agent's usage)."""
        return self._pace.due(now)

    def _take(self) -> list[Action]:
        actions = list(self._out)
        self._out.clear()
        return actions

    def _send(self, message: m.Message, may_drop: bool = False) -> None:
        self._to_scheduler(m.encode(message), may_drop)

    def _to_scheduler(self, frames: list[m.Buffer], may_drop: bool = False, results: bool = False) -> None:
        # All but a hello: held while the scheduler does not know us; results kept until acknowledged.
        if self._session.rejoining:
            if not may_drop:
                self._session.hold(frames)
            return
        if results:
            self._session.sent_results(frames)
        self._out.append(ToScheduler(frames, may_drop))

    # ------------------------------------------------------------------------------------------ events

    def start(self, now: float) -> list[Action]:
        """The first processor, and the hello to the scheduler."""
        self._last_heard = now
        self._pool.active(now)
        self._send(self._hello)
        return self._take()

    def on_scheduler_frames(self, frames: list[m.Buffer], now: float) -> list[Action]:
        heard_before, self._last_heard = self._last_heard, now
        try:
            # Submissions go on to a processor as they came, and it decodes them: only their ids are read here.
            message = m.decode_ids(frames)
        except m.ProtocolDecodeError as error:
            logger.warning(f"Worker[{self._name}]: dropped an undecodable message from the scheduler: {error}")
            return []
        if isinstance(message, m.SubmissionIds):
            active = self._pool.active(now)
            if message.objects:
                if self._made_by:
                    # Another processor than its maker reads these: the scheduler only asks other workers' makers.
                    self._ask_to_publish([
                        item.object_id for item in message.objects
                        if self._made_by.get(item.object_id, active.identity) != active.identity
                    ])
                self._pool.add_objects(active, message.objects)
            active.outstanding.update(dict.fromkeys(message.task_ids))
            self._pool.deliver(active, frames)
        elif isinstance(message, m.CancelTasks):
            named = set(message.task_ids)
            if message.force:
                self._stop_running(named, now)
                self._force_canceled.update(self._held_by_processors(named))
            else:
                self._cancel_unread.update(self._held_by_processors(named) - self._refuse_running(named))
            self._deliver_to_all(frames, named)
        elif isinstance(message, m.ReleaseTasks):
            self._deliver_to_all(frames, set(message.task_ids))
        elif isinstance(message, m.TaskStarted):
            # The go-ahead for a suspect task: to the processor that holds it and waits for it.
            named = set(message.task_ids)
            for processor in self._pool.processors.values():
                if not named.isdisjoint(processor.outstanding):
                    self._pool.deliver(processor, frames)
        elif isinstance(message, m.PublishObjects):
            self._ask_to_publish(message.object_ids)
        elif isinstance(message, m.DeleteObjects):
            if self._made_by:
                for object_id in message.object_ids:
                    self._made_by.pop(object_id, None)
            self._pool.delete_objects(message.object_ids, frames)
        elif isinstance(message, m.Welcome):
            self.store_directory = message.store_directory
            self._pool.set_store_directory(message.store_directory)
            self._on_welcome(message)
        elif isinstance(message, m.StoreDirectory):
            self.store_directory = message
            self._pool.set_store_directory(message)
        elif isinstance(message, m.HeartbeatEcho):
            self._session.echoed()
            self._pace.echoed(message.heartbeat_interval_ms)
            if self._heartbeat_sent_at is not None:
                self._latency_us = int((now - self._heartbeat_sent_at) * 1e6)
                self._heartbeat_sent_at = None
        elif isinstance(message, m.Disconnect):
            self._out.append(Exit(f"scheduler asked us to leave: {message.reason}"))
        elif isinstance(message, m.Refused):
            self._on_refused(message, now, heard_before)
        elif isinstance(message, m.ProtocolError):
            if self._session.still_registered(message.reason):  # back from a standby: leave, then join again
                self._out.append(ToScheduler(m.encode(m.Disconnect(reason="rejoining"))))
                self._out.append(ToScheduler(m.encode(dataclasses.replace(self._hello, rejoining=True))))
            else:
                logger.warning(f"Worker[{self._name}]: scheduler reports a protocol error: {message.reason}")
        return self._take()

    def on_processor_frames(self, identity: bytes, frames: list[m.Buffer], now: float) -> list[Action]:
        processor = self._pool.processors.get(identity)
        if processor is None:
            return []  # a processor we already gave up on
        # Results and handed-over submissions go on as they came: only their ids are read here.
        message = m.decode_ids(frames)
        if isinstance(message, m.ResultIds):
            for task_id in message.finished_ids:
                processor.outstanding.pop(task_id, None)
            for _, object_id in message.stored:
                self._made_by[object_id] = processor.identity
            if self._limits.admit(frames):
                self._to_scheduler(frames, results=True)
            else:
                results = m.decode(frames)
                assert isinstance(results, m.TaskResults)
                self._send_results_in_limits(results)
            self._pool.retire_if_done(processor, now)
        elif isinstance(message, m.SubmissionIds):
            self._pool.hand_over(processor, message.task_ids, frames, now)
        elif isinstance(message, (m.TaskStarted, m.CancelRefused, m.ObjectsLost)):
            # To the scheduler as they come: a suspect task asking to start (the scheduler answers); the tasks a
            # cancel cannot stop, from a processor holding many at once (the Symphony worker's); an input its
            # holders did not give, ahead of its task's `returned`, so that the scheduler parks the task.
            self._to_scheduler(frames)
        elif isinstance(message, m.TaskOutput):
            # What a task printed (streamOutput), on the link of its results so that it comes first; dropped while
            # no scheduler knows this worker (a new one routes no output of re-announced tasks).
            self._to_scheduler(frames, may_drop=True)
        elif isinstance(message, m.Hello):
            self._pool.on_hello(processor)
        elif isinstance(message, m.ProcessorState):
            if message.blocked:
                self._pool.on_blocked(processor, now)
            else:
                self._pool.on_unblocked(processor, now)
        return self._take()

    def on_processor_exit(self, identity: bytes, exit_code: int, now: float) -> list[Action]:
        """A processor exited on its own: the task it was running is blamed, the others go back."""
        processor = self._pool.processors.get(identity)
        if processor is not None:
            self._stop_processor(
                processor, now, m.FailureKind.WORKER_DIED, "scaler.errors.WorkerDiedError",
                f"the processor running this task died (exit code {exit_code})",
            )
        return self._take()

    def on_tick(
        self, now: float, processor_rss: Mapping[bytes, int] | None = None, usage: m.Heartbeat | None = None
    ) -> list[Action]:
        """Limits, idle spares, the scheduler's silence and heartbeats.

        `processor_rss` holds the RSS of the processors the shell could measure (asked for only when
        `watches_memory`); `usage` is a heartbeat holding only the CPU and memory figures of the agent and
        its processors, measured when `heartbeat_due(now)` said so; the core fills in the rest.
        """
        self._watch_running_tasks(now)
        self._stop_late_starts(now)
        self._refuse_late_starts()
        for over in over_limits(self._config, list(self._pool.processors.values()), now, processor_rss or {}):
            self._stop_processor(over.processor, now, m.FailureKind.RAISED, over.type_name, over.message,
                                 over.error_type)
        self._ask_for_held_results(now)
        processor_count = len(self._pool.processors)
        self._pool.trim_spares(now)
        if len(self._pool.processors) < processor_count:
            self._report_unwritten_lost()
        config = self._config
        moved_to = self.addresses.on_tick(now, self._last_heard)
        if moved_to is not None:
            self._move(moved_to, now)
        if now - self._last_heard > config.death_timeout_seconds:
            if not self._welcomed:
                self._out.append(Exit(
                    f"no scheduler answered at {config.address} within {config.death_timeout_seconds:g}s "
                    "(--death-timeout-seconds), exiting: is a scheduler running there, and reachable?",
                    failed=True, level=logging.ERROR,
                ))
            else:
                self._out.append(Exit(
                    f"no word from the scheduler for {config.death_timeout_seconds:g}s, exiting "
                    f"(--death-timeout-seconds; the scheduler was at {config.address})", level=logging.WARNING,
                ))
            return self._take()
        if self._session.rejoining:
            if self._session.hello_due(now):
                self._out.append(ToScheduler(m.encode(dataclasses.replace(self._hello, rejoining=True))))
            return self._take()
        if self.heartbeat_due(now):
            self._session.heartbeat_sent()
            self._pace.sent(now)
            self._heartbeat_sent_at = now
            self._send(dataclasses.replace(
                usage or m.Heartbeat(),
                queued_tasks=sum(len(processor.outstanding) for processor in self._pool.processors.values()),
                latency_us=self._latency_us,
            ), may_drop=True)
        return self._take()

    def check_invariants(self) -> None:
        """Raise AssertionError if the core's state disagrees with itself (the tests call this after every step)."""
        self._pool.check_invariants()
        assert not self._out, "actions left behind by an event"

    # ------------------------------------------------------------------------------------------ scheduler

    def _on_welcome(self, welcome: m.Welcome) -> None:
        self._pace.welcomed(welcome)
        self._limits = SizeLimits(welcome.max_frame_bytes, welcome.max_control_frame_bytes)
        for frames in self._session.welcomed(self._pool.outstanding_task_ids(), f"Worker[{self._name}]", welcome):
            self._to_scheduler(frames, results=True)  # a re-announcement, then what was held back (§21)
        self._heartbeat_sent_at = None
        self.addresses.welcomed()
        if not self._welcomed:
            self._welcomed = True
            self._out.append(Registered())

    def _on_refused(self, refused: m.Refused, now: float, heard_before: float) -> None:
        # Unknown to a scheduler that restarted: hello again. A standby: the next address (not a word from one that
        # serves: the death timeout runs on). Else our hello was refused, which is final.
        if refused.standby:
            self._last_heard = heard_before
            self.addresses.refused(now)
            return
        if refused.unknown_peer and self._welcomed:
            if self._session.lost(now, f"Worker[{self._name}]", self._config.address):
                self._out.append(ToScheduler(m.encode(dataclasses.replace(self._hello, rejoining=True))))
            return
        failed = not self._welcomed or self._session.rejoining
        reason = refused_by_scheduler("worker", self._config.address, refused.reason)
        self._out.append(Exit(reason, failed, logging.ERROR if failed else logging.WARNING))

    def _move(self, address: str, now: float) -> None:
        """To the next scheduler address (silent, or a standby): hello there, rejoining if welcomed before (§21)."""
        logger.warning(f"Worker[{self._name}]: trying the scheduler at {address}")
        self._out.append(Reconnect(address))
        if self._welcomed:
            self._session.lost(now, f"Worker[{self._name}]", address, why="is the next to try")
        self._out.append(ToScheduler(m.encode(dataclasses.replace(self._hello, rejoining=self._welcomed))))

    def _running_task_of(self, processor: ProcessorRecord) -> int | None:
        """The task this processor runs, if it is one the scheduler gave us and it has not answered."""
        running = self._running_tasks.running_task_id(processor.identity)
        return running if running in processor.outstanding else None

    def _deliver_to_all(self, frames: list[m.Buffer], named: set[int]) -> None:
        """A cancel or release goes to every processor; one busy with a task is signalled to read it now.

        A processor reads its socket between tasks; the signal makes it answer for the tasks queued
        behind a long one at once (see Processor._on_agent_signal).
        """
        for processor in self._pool.processors.values():
            self._pool.deliver_urgent(processor, frames)
            queued_here = named.intersection(processor.outstanding)
            if not processor.ready or not queued_here:
                continue
            running = self._running_task_of(processor)
            if running is not None and queued_here != {running}:
                self._out.append(SignalProcessor(processor.identity, processor.urgent_sent))

    def _ask_to_publish(self, object_ids: list[bytes]) -> None:
        """Have the makers of these results write them into the store now, even in the middle of a task."""
        by_maker: dict[bytes, list[bytes]] = {}
        for object_id in object_ids:
            maker = self._made_by.pop(object_id, None)
            if maker is not None:
                by_maker.setdefault(maker, []).append(object_id)
        for maker, ids in by_maker.items():
            processor = self._pool.processors.get(maker)
            if processor is None:
                continue
            self._pool.deliver_urgent(processor, m.encode(m.PublishObjects(object_ids=ids)))
            if processor.ready and self._running_task_of(processor) is not None:
                self._out.append(SignalProcessor(processor.identity, processor.urgent_sent))

    def _report_unwritten_lost(self) -> None:
        """Results that processors now stopped may not have written into the store are gone with them: the
        scheduler makes again those still needed (lineage.py)."""
        processors = self._pool.processors
        lost = [object_id for object_id, maker in self._made_by.items() if maker not in processors]
        if lost:
            for object_id in lost:
                del self._made_by[object_id]
            self._send(m.ObjectsLost(object_ids=lost))

    def _refuse_running(self, named: set[int]) -> set[int]:
        """Say at once which of these tasks have started (a processor's slot names them): cancel cannot stop them."""
        started = [
            running for running in map(self._running_task_of, self._pool.processors.values())
            if running is not None and running in named
        ]
        if started:
            self._send(m.CancelRefused(task_ids=started))
        return set(started)

    def _refuse_late_starts(self) -> None:
        """A cancelled task that started after its cancel came (unread behind it) is refused as it would have been
        had it started before: the processor reads nothing while the task runs, so it cannot say so itself."""
        if not self._cancel_unread:
            return
        self._cancel_unread = self._held_by_processors(self._cancel_unread)  # the answered ones are done with
        started = self._refuse_running(self._cancel_unread)
        self._cancel_unread -= started

    def _stop_running(self, named: set[int], now: float) -> None:
        """Force-cancel: a processor running one of these tasks is stopped; the task ends canceled."""
        for processor in list(self._pool.processors.values()):
            running = self._running_task_of(processor)
            if running is not None and running in named:
                self._stop_processor(processor, now, m.FailureKind.CANCELED, "", "")

    def _held_by_processors(self, named: set[int]) -> set[int]:
        held: set[int] = set()
        for processor in self._pool.processors.values():
            held.update(named.intersection(processor.outstanding))
        return held

    def _stop_late_starts(self, now: float) -> None:
        """A force-cancelled task that started after its cancel came (unread behind it) is stopped as it would
        have been had it started before: the processor reads nothing while the task runs."""
        if not self._force_canceled:
            return
        self._force_canceled = self._held_by_processors(self._force_canceled)  # the answered ones are done with
        self._stop_running(self._force_canceled, now)

    # ------------------------------------------------------------------------------------------ processors

    def _watch_running_tasks(self, now: float) -> None:
        """Note, for each processor, the task its slot names and since when (a tick saw it first)."""
        for processor in self._pool.processors.values():
            slot = self._running_tasks.running_task_id(processor.identity)
            if slot != processor.watched_task_id:
                processor.watched_task_id, processor.watched_since = slot, now

    def _ask_for_held_results(self, now: float) -> None:
        """Signal a processor whose task has run since the last tick while an older task of its is unanswered.

        A processor sends its results in batches, at most every few milliseconds: a task that ends right
        after a batch went out keeps its result until the next one, and when the next task runs long (or
        waits on a gate, or on a user) that is the whole of it. Tasks run in the order they came, so a task
        sent before the running one and still unanswered has ended and waits in such a batch; the signal
        makes the processor send it (see ProcessorCore.answer_signal). Once per running task, and only past a
        tick, so that a stream of short tasks, whose batches go out anyway, is never signalled.
        """
        for processor in self._pool.processors.values():
            running = processor.watched_task_id
            if (
                running == processor.held_results_asked_for
                or now - processor.watched_since < _HELD_RESULTS_AFTER_SECONDS
                or not processor.ready
                or running not in processor.outstanding
                or next(iter(processor.outstanding)) == running
            ):
                continue
            processor.held_results_asked_for = running
            self._out.append(SignalProcessor(processor.identity, processor.urgent_sent))

    def _stop_processor(
        self, processor: ProcessorRecord, now: float, kind: m.FailureKind, type_name: str, message: str,
        error_type: type[Exception] | None = None,
    ) -> None:
        """Stop (or bury) a processor: its running task ends with the given failure, the rest go back untried.

        The task blamed is the one its slot names now, when the decision is made; the processor may
        still start another before the shell stops it, and that one goes back untried with the rest.
        """
        running = self._running_task_of(processor)
        failures = []
        for task_id in processor.outstanding:
            if task_id == running:
                # An error of scaler.errors: the standard pickler writes the bytes cloudpickle would (an importable
                # class goes by reference), and the agent does not import cloudpickle for it.
                exception = b"" if error_type is None else pickle.dumps(error_type(message), pickle.HIGHEST_PROTOCOL)
                failures.append(m.TaskFailure(
                    task_id=task_id, kind=kind, type_name=type_name, message=message, exception=exception
                ))
            else:
                failures.append(m.TaskFailure(task_id=task_id, kind=m.FailureKind.RETURNED))
        logger.warning(
            f"Worker[{self._name}]: processor {processor.identity.decode()} stopped "
            f"({message or kind.name.lower()}); {len(failures)} task(s) handed back to the scheduler"
        )
        if self._pool.remove(processor):
            self._pool.active(now)
        self._report_unwritten_lost()
        if failures:
            self._send(m.TaskResults(succeeded_ids=[], payloads=[], failures=failures))

    def _send_results_in_limits(self, results: m.TaskResults) -> None:
        batches, too_large = split_results(results, self._limits)
        logger.warning(
            f"Worker[{self._name}]: results over the scheduler's limits; {too_large} failed as too large, "
            "the rest sent in parts"
        )
        for batch in batches:
            self._send(batch)
