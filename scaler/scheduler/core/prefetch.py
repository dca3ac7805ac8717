"""How many tasks each worker holds: enough to stay busy until the next ones arrive, and no more.

A worker runs what it holds in the order it got it, so a task sent to a worker waits behind everything
queued there, whoever it belongs to: the scheduler's own order (a fair turn between clients, priorities)
holds only for the tasks it still has. Deep queues are what make tiny tasks fly (the next task is on the
worker when a result leaves); shallow ones are what let a newcomer's task start soon after a slot frees.
The depth that serves both is measured per worker:

- **The pace**, from the tasks' own running time as the worker measures it: each results message says how
  many of its tasks ran and how long they took in all (`TaskResults.run_seconds`, wall clock from taking a
  task to having its outcome). A worker's time per task is that, over its `concurrency`. It was measured
  from outside before, as the time between a worker's results, and a worker waiting for a CPU looked slow:
  with 100 native workers on 2 cores the depths shrank, the messages multiplied and the workers waited
  longer still (15x slower). A task's run time does not include the time its worker waited for its turn.
  A sample spans `SAMPLE_TASKS` tasks or `SAMPLE_SECONDS` of running, whichever comes first; a slower pace
  is believed when two samples in a row say so (one task that a pause or a collection made slow is no
  reason to shrink a queue), a faster one halfway at each sample.
- **A worker that does not measure** (a peer older than the field, or one that runs tasks elsewhere) sends
  no run time: it holds its whole capacity, as with prefetch off. A guess from outside would be the
  collapse above; full queues cost only what they cost before. Of a function other workers measured, it
  holds what that pace needs (`for_function`).
- **The depth.** The running task plus `--worker-queue-seconds` (0.05 s by default) of queued work: what
  covers a results batch (the processor sends at most every 5 ms), the way back, the scheduler's turn and
  the way out again, with room for a loaded machine. No-op tasks get the capacity (1000 by default, as
  before), 10 ms tasks 6, tasks of 50 ms or more 2; 0 turns all of this off (every worker gets its
  capacity). Until a worker's pace is known it holds `FIRST_DEPTH` (a flood of 10 ms tasks never lands
  1000 deep on a worker that just joined); its first results message, whatever it holds, is a sample, and
  the depth follows each sample at once (no slow start: that was for guesses from outside).
- **Per function.** A worker's pace is that of the tasks it ran: after no-op tasks it would take its whole
  capacity of a new function's 10 ms tasks. Dispatch also bounds each worker by the pace of the functions it
  hands out next (function_pace.py, `for_function`): a function never measured is held `FIRST_DEPTH` deep.
- **A stall.** A worker that held tasks and sent no result for a while is running a long task: the
  time since is a lower bound of that task's duration, and its depth shrinks to match, on a tick.
- **Taking back.** A worker that holds well beyond its depth (the tasks changed from tiny to slow, or a
  long one stalls it) is asked to give back the newest of its unstarted tasks (ReleaseTasks, as
  balancing does), when they amount to `TAKE_BACK_WORTH_SECONDS` of work or more, at most once per
  `TAKE_BACK_EVERY_SECONDS`: they return to the scheduler, where the fair order applies to them again.
- **Nested tasks.** A task waiting on the tasks it submitted (docs/nested_tasks.md) holds a slot on its
  worker and finishes nothing until they do, and the scheduler cannot tell it from a queued task: were
  depths small, a recursion would fill every slot with waiting parents and deadlock. So while tasks from
  inside tasks are unfinished (those of the clients that submitted with a nesting depth), and for
  `NESTED_GRACE_SECONDS` after the last such submission, every worker may hold its whole capacity, as before.
  (A processor leaves a task that waited on nested tasks out of its run time: it handed its queue on.)

A worker that runs several tasks at once says how many in its hello (`concurrency`: a Python worker one, a
native worker `--threads`, the Symphony worker its base concurrency): "the running task" above is then that
many tasks, and the pace is the running time per task over that many.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from scaler.protocol import messages as m
from scaler.scheduler.core.outgoing import Outgoing

if TYPE_CHECKING:  # peer_registry.py imports this module for WorkerPace
    from scaler.scheduler.core.peer_registry import ClientPeer, WorkerPeer

logger = logging.getLogger(__name__)

# What a worker holds before its pace is known (it grows by doubling from here).
FIRST_DEPTH = 4
# How far a faster sample moves the pace (a slower one, confirmed by the next, moves it all the way).
FASTER_WEIGHT = 0.5
# A sample of the pace spans at least this many tasks run, or this many seconds of their running.
SAMPLE_SECONDS = 0.02
SAMPLE_TASKS = 16
# A worker silent this long while holding tasks, and for several of its tasks' time, is running a long one.
STALL_SECONDS = 1.0
STALL_TASKS = 10
# Tasks beyond a worker's depth are taken back only when they amount to this much work, and at most this often.
TAKE_BACK_WORTH_SECONDS = 0.5
TAKE_BACK_EVERY_SECONDS = 1.0
# After a submission from inside a task, how long every worker may hold its whole capacity at least.
NESTED_GRACE_SECONDS = 1.0


@dataclasses.dataclass(slots=True)
class WorkerPace:
    """What is measured of one worker."""

    # Seconds per task (its running time over the worker's concurrency); 0.0 until measured.
    seconds_per_task: float = 0.0
    # Whether the worker says how long its tasks ran: None until its first results, False for a peer that does not
    # (it holds its whole capacity).
    measured: bool | None = None
    # Tasks run and their seconds in all, reported since the last sample, while a sample is not yet large enough.
    ran: int = 0
    run_seconds: float = 0.0
    # The last results message after which it still held tasks; None when it held none then (for stalls).
    busy_since: float | None = None
    # The last sample, and the quicker of the last two: a slower pace is believed, and tasks taken back, only by the
    # latter, as one slow sample may be a pause, tasks that became slower make every one slow.
    last_sample: float = math.inf
    steady: float = math.inf
    taken_back_at: float = -math.inf


def depth_for(seconds_per_task: float, capacity: int, horizon_seconds: float, concurrency: int = 1) -> int:
    """The `concurrency` running tasks plus `horizon_seconds` of queued work at this pace, within [1, capacity]."""
    if seconds_per_task <= 0.0:
        return min(max(FIRST_DEPTH, concurrency + 1), capacity)
    queued = horizon_seconds / seconds_per_task
    if queued >= capacity:  # also a pace so small that the quotient overflows to infinity
        return capacity
    # Less a hair, so that a pace of exactly a tenth of the horizon queues ten tasks, not eleven.
    return min(capacity, concurrency + math.ceil(queued - 1e-9))


def finished_count(results: m.TaskResults) -> int:
    """Tasks this results message says were run: outcomes, not tasks given back or canceled unstarted."""
    count = len(results.succeeded_ids) + len(results.stored)
    if results.failures:
        count += sum(1 for failure in results.failures if failure.kind == m.FailureKind.RAISED)
    return count


class Prefetch:
    def __init__(self, horizon_seconds: float) -> None:
        # Seconds of queued work beyond the running task; 0: every worker holds its capacity.
        self._horizon = horizon_seconds
        # Until when every worker may hold its whole capacity at least (a submission came from inside a task),
        # and the clients that submitted from inside tasks: it lasts while any of them has unfinished tasks.
        self._nested_until = -math.inf
        self._nested_clients: dict[bytes, ClientPeer] = {}
        # Tasks asked back from workers since start (for the tests and the logs).
        self.taken_back = 0

    @property
    def horizon(self) -> float:
        """Seconds of queued work a worker holds beyond its running tasks (0: prefetch is off)."""
        return self._horizon

    @property
    def unlimited(self) -> bool:
        """Whether every worker holds its capacity now: prefetch is off, or tasks come from inside tasks."""
        return self._horizon <= 0.0 or self._nested_until > -math.inf

    def joined(self, worker: WorkerPeer) -> None:
        worker.depth = worker.capacity if self.unlimited else self._depth(worker, 0.0)

    def on_results(self, worker: WorkerPeer, results: m.TaskResults, now: float, out: list[Outgoing]) -> None:
        """Before the dispatch this results message causes: a new sample of the worker's pace, and its depth."""
        if self._horizon <= 0.0:
            return  # off: nothing reads the pace, and a task's hot path should not pay for it
        pace = worker.pace
        ran = results.ran_tasks
        if not ran:
            if pace.measured is None and finished_count(results):
                pace.measured = False  # a peer that does not measure: its capacity, until it says otherwise
                # Once per worker, so that a queue deeper than its tasks' pace needs explains itself in the log.
                logger.info(f"worker {worker.name}: its first results say no run time; it may hold its whole "
                               f"capacity ({worker.capacity}) of tasks never measured elsewhere")
                if not self.unlimited:
                    worker.depth = worker.capacity
            return
        reported = results.run_seconds
        if not 0.0 <= reported < math.inf:
            return  # NaN, negative or infinite: no measure at all (a peer's defect must not reach the depths)
        pace.measured = True
        ran = pace.ran = pace.ran + ran
        run_seconds = pace.run_seconds = pace.run_seconds + reported
        concurrency = worker.concurrency
        if ran < SAMPLE_TASKS and run_seconds < SAMPLE_SECONDS * concurrency and pace.seconds_per_task:
            return  # the first sample is taken at once: the worker holds only FIRST_DEPTH tasks until then
        pace.ran, pace.run_seconds = 0, 0.0
        sample = max(run_seconds, 0.0) / ran / concurrency
        steady = pace.steady = min(sample, pace.last_sample)
        pace.last_sample = sample
        if steady >= pace.seconds_per_task:
            pace.seconds_per_task = steady
        else:
            pace.seconds_per_task += (steady - pace.seconds_per_task) * FASTER_WEIGHT
        if self.unlimited:
            return
        # At once, not by a slow start: the worker's own measure is not fooled by its waiting for a CPU.
        depth = worker.depth = self._depth(worker, pace.seconds_per_task)
        if len(worker.assigned) > depth:
            self._take_back(worker, steady, now, out)

    def after_dispatch(self, worker: WorkerPeer, now: float) -> None:
        """After the dispatch a results message caused: silence is counted from here while the worker holds tasks."""
        if self._horizon <= 0.0:
            return
        worker.pace.busy_since = now if worker.assigned else None

    def on_nested_submission(self, client: ClientPeer, workers: Iterable[WorkerPeer], now: float) -> None:
        """Tasks came from inside a task: every worker may hold its capacity until they and their like are done."""
        if self._horizon <= 0.0:
            return
        self._nested_clients[client.identity] = client
        if not self.unlimited:
            logger.info(f"tasks from inside tasks (client {client.name}): every worker may hold its whole capacity "
                           "until they are done")
            for worker in workers:
                worker.depth = worker.capacity
        self._nested_until = now + NESTED_GRACE_SECONDS

    def on_tick(self, workers: Iterable[WorkerPeer], now: float, out: list[Outgoing]) -> None:
        """The nested grace ending, stalled workers' depths, and tasks taken back from workers holding too many."""
        if self.unlimited:
            if self._horizon <= 0.0 or now < self._nested_until:
                return
            if any(client.task_ids for client in self._nested_clients.values()):
                return  # a parent may still wait on these, holding its slot
            self._nested_until = -math.inf
            self._nested_clients.clear()
            for worker in workers:
                worker.depth = self._depth(worker, worker.pace.seconds_per_task)
        for worker in workers:
            pace = worker.pace
            steady = pace.steady
            if pace.busy_since is not None and pace.seconds_per_task > 0.0:
                silent = now - pace.busy_since
                if silent >= STALL_SECONDS and silent >= STALL_TASKS * pace.seconds_per_task:
                    # The running task has taken `silent` so far: the depth is at most what that pace allows.
                    worker.depth = min(worker.depth, self._depth(worker, silent))
                    steady = silent
            if len(worker.assigned) > worker.depth:
                self._take_back(worker, steady, now, out)

    def for_function(self, worker: WorkerPeer, seconds: float | None) -> int:
        """The most tasks `worker` should hold when the next ones take `seconds` each (their function's pace,
        function_pace.py; None: never measured, held as by a worker that just joined). The capacity with
        prefetch off and while tasks are nested. A worker that does not measure holds its capacity of a function
        never measured, and is held to the pace other workers measured of one that was: that pace is no guess
        from outside, and a worker wrongly taken for one that does not measure then takes no more than it should."""
        if self.unlimited:
            return worker.capacity
        if seconds is None:
            if worker.pace.measured is False:
                return worker.capacity
            return depth_for(0.0, worker.capacity, self._horizon, worker.concurrency)
        if seconds <= 0.0:
            return worker.capacity
        return depth_for(seconds / worker.concurrency, worker.capacity, self._horizon, worker.concurrency)

    def _depth(self, worker: WorkerPeer, seconds_per_task: float) -> int:
        if worker.pace.measured is False:
            return worker.capacity
        return depth_for(seconds_per_task, worker.capacity, self._horizon, worker.concurrency)

    def _take_back(self, worker: WorkerPeer, seconds_per_task: float, now: float, out: list[Outgoing]) -> None:
        """The newest tasks beyond the depth this pace allows, if they are worth taking back."""
        if seconds_per_task == math.inf:
            return  # not two samples yet
        depth = self._depth(worker, seconds_per_task)
        excess = len(worker.assigned) - depth
        pace = worker.pace
        if (
            excess <= 0 or worker.draining or excess * seconds_per_task < TAKE_BACK_WORTH_SECONDS
            or now - pace.taken_back_at < TAKE_BACK_EVERY_SECONDS
        ):
            return
        pace.taken_back_at = now
        # The newest: a worker runs its tasks in the order it got them, so these are the ones not started.
        newest = list(worker.assigned)[depth:]
        out.append((worker.identity, m.ReleaseTasks(task_ids=newest)))
        self.taken_back += len(newest)
