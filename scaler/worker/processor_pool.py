"""A worker agent's processors and their roles: which one serves, which wait on nested tasks, which idle.

One processor is active: it receives the tasks the scheduler sends. When its task waits on nested
tasks (docs/nested_tasks.md), the agent grants the wait if --max-processors allows: the waiting
processor becomes blocked, hands its queue over, and another becomes active (an idle spare if there is
one, else a new process; one spare is started ahead, since nested waits come in runs). When the wait
ends the processor is finishing: it gets no new tasks, and once its last one is answered it is a spare.

The pool also keeps what each processor was sent: the tasks it holds and the objects it was given.
Frames for a processor that has not said hello yet wait here, since the agent's ROUTER would drop them.
Part of the sans-I/O agent core: it asks for processes to start and stop through actions.
"""

from __future__ import annotations

import dataclasses
import enum
import logging

from scaler.protocol import messages as m
from scaler.worker.agent_actions import Action, StartProcessor, StopProcessor, ToProcessor

logger = logging.getLogger(__name__)

# Beyond the first, a spare idle this long is stopped: starting a processor costs far more than keeping one.
SPARE_IDLE_SECONDS = 30.0


class ProcessorRole(enum.Enum):
    ACTIVE = "active"        # receives the tasks the scheduler sends
    BLOCKED = "blocked"      # its task waits on nested tasks
    FINISHING = "finishing"  # its task stopped waiting; it gets no new tasks
    SPARE = "spare"          # idle, kept to become active quickly


@dataclasses.dataclass(eq=False)
class ProcessorRecord:
    """What the agent knows of one processor."""

    identity: bytes
    role: ProcessorRole
    ready: bool = False
    # Frames sent before the processor said hello; delivered once it has.
    backlog: list[list[m.Buffer]] = dataclasses.field(default_factory=list)
    # Tasks handed to it and not yet answered, oldest first.
    outstanding: dict[int, None] = dataclasses.field(default_factory=dict)
    # Objects it was given; one that becomes active is sent the rest before any task.
    object_ids: set[bytes] = dataclasses.field(default_factory=set)
    idle_since: float = 0.0
    # Urgent messages (cancel, release, publish) sent it so far, counted so that a signal can say how many
    # it must have read (agent_actions.SignalProcessor).
    urgent_sent: int = 0
    # The task id last seen in its running-task slot, and since when (a tick's time): for --task-timeout-seconds,
    # and to ask for results it holds back while a long task runs.
    watched_task_id: int = 0
    watched_since: float = 0.0
    # The running task for which it was last asked to send the results it holds (agent_core._ask_for_held_results).
    held_results_asked_for: int = 0


class ProcessorPool:
    def __init__(self, worker_name: str, max_processors: int, out: list[Action]) -> None:
        self._worker_name = worker_name
        self._max_processors = max_processors
        # The core's outbox: what the pool asks of the shell goes in order with the rest.
        self._out = out
        self.processors: dict[bytes, ProcessorRecord] = {}
        self._active: ProcessorRecord | None = None
        self._started = 0
        # Kept so that a new processor can be given every object the scheduler thinks we hold.
        self.objects: dict[bytes, m.ObjectPayload] = {}
        # The scheduler's directory of stores, encoded, for every processor (they read stored objects).
        self._store_directory: list[m.Buffer] | None = None

    # ------------------------------------------------------------------------------------------ roles

    def active(self, now: float) -> ProcessorRecord:
        """The processor that takes new tasks: a spare made active, or a new one, if there is none."""
        if self._active is None:
            spare = next((p for p in self.processors.values() if p.role is ProcessorRole.SPARE), None)
            if spare is not None:
                spare.role = ProcessorRole.ACTIVE
                self._give_missing_objects(spare)
                self._active = spare
            else:
                self._active = self.start(ProcessorRole.ACTIVE, now)
        return self._active

    def on_blocked(self, processor: ProcessorRecord, now: float) -> None:
        """Its task is about to wait on nested tasks: grant the wait and let another serve, or refuse it."""
        busy = sum(1 for other in self.processors.values() if other.role is not ProcessorRole.SPARE)
        if busy >= self._max_processors:
            self.deliver(processor, m.encode(m.ProcessorState(
                blocked=True, granted=False,
                reason=(
                    f"worker {self._worker_name} already runs {busy} processors, {busy - 1} of them waiting on "
                    f"nested tasks (--max-processors {self._max_processors}); nest less deeply or raise the limit"
                ),
            )))
            return
        # It hands its queue over right after our answer; only the waiting task stays with it.
        processor.role = ProcessorRole.BLOCKED
        logger.debug(
            f"Worker[{self._worker_name}]: processor {processor.identity.decode()} waits on nested tasks; "
            f"{busy} busy processor(s), roles {[p.role.value for p in self.processors.values()]}"
        )
        if self._active is processor:
            self._active = None
            self.active(now)
        self.deliver(processor, m.encode(m.ProcessorState(blocked=True, granted=True)))
        if busy + 1 < self._max_processors and not any(
            other.role is ProcessorRole.SPARE for other in self.processors.values()
        ):
            self._retire(self.start(ProcessorRole.SPARE, now), now)

    def on_unblocked(self, processor: ProcessorRecord, now: float) -> None:
        if processor.role is ProcessorRole.BLOCKED:
            processor.role = ProcessorRole.FINISHING
            self.retire_if_done(processor, now)

    def hand_over(self, processor: ProcessorRecord, task_ids: list[int], frames: list[m.Buffer], now: float) -> None:
        """A blocked processor's queue, sent back to the agent: it goes to the processor that serves now."""
        active = self.active(now)
        for task_id in task_ids:
            processor.outstanding.pop(task_id, None)
            active.outstanding[task_id] = None
        self.deliver(active, frames)

    def retire_if_done(self, processor: ProcessorRecord, now: float) -> None:
        if processor.role is ProcessorRole.FINISHING and not processor.outstanding:
            self._retire(processor, now)

    def _retire(self, processor: ProcessorRecord, now: float) -> None:
        processor.role = ProcessorRole.SPARE
        processor.idle_since = now

    def trim_spares(self, now: float) -> None:
        spares = sorted(
            (p for p in self.processors.values() if p.role is ProcessorRole.SPARE), key=lambda p: p.idle_since
        )
        for processor in spares[1:]:
            if now - processor.idle_since > SPARE_IDLE_SECONDS:
                self.remove(processor)

    # ------------------------------------------------------------------------------------------ processes

    def start(self, role: ProcessorRole, now: float) -> ProcessorRecord:
        identity = f"P{self._started}".encode()
        self._started += 1
        processor = ProcessorRecord(identity=identity, role=role, idle_since=now)
        self.processors[identity] = processor
        self._out.append(StartProcessor(identity))
        if self._store_directory is not None:
            self.deliver(processor, self._store_directory)
        self._give_missing_objects(processor)
        return processor

    def remove(self, processor: ProcessorRecord) -> bool:
        """Stop a processor and forget it; returns whether it was the active one (the caller replaces it)."""
        del self.processors[processor.identity]
        was_active = self._active is processor
        if was_active:
            self._active = None
        self._out.append(StopProcessor(processor.identity))
        return was_active

    def on_hello(self, processor: ProcessorRecord) -> None:
        processor.ready = True
        for frames in processor.backlog:
            self._out.append(ToProcessor(processor.identity, frames))
        processor.backlog.clear()

    # ------------------------------------------------------------------------------------------ delivery

    def deliver(self, processor: ProcessorRecord, frames: list[m.Buffer]) -> None:
        if processor.ready:
            self._out.append(ToProcessor(processor.identity, frames))
        else:
            processor.backlog.append(frames)

    def deliver_urgent(self, processor: ProcessorRecord, frames: list[m.Buffer]) -> None:
        """A cancel, release or publish: counted, since a signal may follow it (see SignalProcessor)."""
        processor.urgent_sent += 1
        self.deliver(processor, frames)

    def add_objects(self, processor: ProcessorRecord, objects: list[m.ObjectPayload]) -> None:
        for item in objects:
            self.objects[item.object_id] = item
            processor.object_ids.add(item.object_id)

    def set_store_directory(self, directory: m.StoreDirectory) -> None:
        """The stores and this worker's home store: every processor reads stored objects through them."""
        if not directory.stores and self._store_directory is None:
            return  # no store yet: the processors have nothing to learn
        self._store_directory = m.encode(directory)
        for processor in self.processors.values():
            self.deliver(processor, self._store_directory)

    def delete_objects(self, object_ids: list[bytes], frames: list[m.Buffer]) -> None:
        for object_id in object_ids:
            self.objects.pop(object_id, None)
        for processor in self.processors.values():
            processor.object_ids.difference_update(object_ids)
            self.deliver(processor, frames)

    def _give_missing_objects(self, processor: ProcessorRecord) -> None:
        missing = [item for object_id, item in self.objects.items() if object_id not in processor.object_ids]
        if missing:
            self.deliver(processor, m.encode(m.TaskSubmission(objects=missing, groups=[])))
            processor.object_ids.update(item.object_id for item in missing)

    def holder_of(self, task_id: int) -> ProcessorRecord | None:
        return next((p for p in self.processors.values() if task_id in p.outstanding), None)

    def outstanding_task_ids(self) -> list[int]:
        """Every task the processors hold from the scheduler and have not answered, running or queued."""
        return [task_id for processor in self.processors.values() for task_id in processor.outstanding]

    def check_invariants(self) -> None:
        """Raise AssertionError if the roles or holdings disagree (the tests call this after every step)."""
        actives = [p for p in self.processors.values() if p.role is ProcessorRole.ACTIVE]
        assert len(actives) <= 1, f"{len(actives)} active processors"
        assert self._active is None or (actives == [self._active] and self._active.identity in self.processors), (
            "the active processor is not the one with the active role"
        )
        assert len(self.processors) <= self._max_processors, (len(self.processors), self._max_processors)
        held: set[int] = set()
        for identity, processor in self.processors.items():
            assert processor.identity == identity
            assert held.isdisjoint(processor.outstanding), f"a task is held by two processors: {identity!r}"
            held.update(processor.outstanding)
            assert processor.role is not ProcessorRole.SPARE or not processor.outstanding, "a spare holds tasks"
            assert processor.ready or not processor.outstanding or processor.backlog, "tasks sent nowhere"
            assert not (processor.ready and processor.backlog), "a ready processor has a backlog"
            assert processor.object_ids <= self.objects.keys(), "a processor keeps an object the scheduler freed"
