"""How long each function's tasks run, as workers report it: what lets placement give idle workers batches.

Placement spreads a chunk of ready tasks over the idle workers (water filling), which is right for long
tasks: 1,000 tasks of 10 s on 500 idle workers should run 2 on each. For tiny tasks it is the scheduler's
cost: the same 1,000 no-op tasks are 500 messages of 2 tasks out and 500 results messages back, and at
hundreds of workers the cost per message is most of the cost per task (a 2-worker cluster carries hundreds
of tasks per message). Once a function's tasks are known to be tiny, an idle worker is given at least
`BATCH_SECONDS` of them (served_count in placement.py): the chunk goes to a few workers in large messages,
and it is done as soon as it would have been on 500. Only idle workers (holding no task) get such batches:
tiny tasks queued behind a running slow one would wait for it, where water filling sends them elsewhere.

The pace is per function, not per worker: a worker that ran no-op tasks tells nothing of the next
function's tasks, and long tasks piled on a few workers would wait there until prefetch took them back
(a stall is noticed only after a second). A function never measured, or any function of a batch that is
slow, keeps the water filling of before.

The pace also bounds how deep a worker's queue gets for the next tasks (slowest_ahead; Prefetch.for_function):
a worker's own pace (prefetch.py) is that of the tasks it ran, and after no-op tasks it allowed a worker its
whole capacity of a new function's 10 ms tasks until two samples of those came back. Tasks of a function
never measured are held as by a worker that just joined (`FIRST_DEPTH`), until its first results say more.

A sample is one results message whose first and last finished tasks ran the same function (of those that
succeeded, and of those that raised: a failure is a measure too, or a function whose tasks all fail would stay
held as never measured): its run time over the tasks it ran (`TaskResults.run_seconds`, `ranTasks`; a worker
that does not measure sends none).
A slower sample is believed at once (a slow function batched by mistake is the costly error), a faster one
halfway. A mixed message gives its average only to the functions at its ends that were never measured.
At most `FUNCTIONS_KEPT` functions are remembered, the oldest forgotten first.
"""

from __future__ import annotations

import math

from scaler.protocol import messages as m
from scaler.scheduler.core.ready_queue import ReadyQueue
from scaler.scheduler.core.task_record import TaskRecord

# An idle worker is given at least this much work at its function's pace (5 ms: 2,500 tasks of 2 µs). At 1 ms
# (500 such tasks, but 60 at the pace no-op tasks show on a loaded machine) 500 workers cost the scheduler 4 to 7 times
# the messages of 5 ms and 15 to 25% more CPU per task (benchmarks/README.md, "heartbeats spaced out at scale").
BATCH_SECONDS = 0.005
FUNCTIONS_KEPT = 1024
FASTER_WEIGHT = 0.5


class FunctionPace:
    __slots__ = ("_seconds",)

    def __init__(self) -> None:
        # Function id -> seconds per task (its run time, not divided by the worker's concurrency).
        self._seconds: dict[bytes, float] = {}

    def note(self, results: m.TaskResults, records: dict[int, TaskRecord]) -> None:
        """Before the results are taken (their records still known): a sample of their function's pace."""
        ran = results.ran_tasks
        if not ran:
            return
        ends = _ends(results)
        if not ends:
            return
        function_ids = []
        for task_id in ends:
            record = records.get(task_id)
            if record is None:
                return
            function_ids.append(record.signature.function_id)
        sample = max(results.run_seconds, 0.0) / ran
        if not sample < math.inf:
            return  # NaN or infinite: no measure (a peer's defect must not reach the paces)
        seconds = self._seconds
        function_id = function_ids[0]
        if any(other != function_id for other in function_ids):
            # A mixed message says little of either function, but more than nothing: a function never measured
            # gets its average, so that its tasks are no longer held back as unknown (first_depth below).
            for unknown in dict.fromkeys(function_ids):
                if unknown not in seconds:
                    self._remember(unknown, sample)
            return
        known = seconds.get(function_id)
        if known is None:
            self._remember(function_id, sample)
        elif sample >= known:
            seconds[function_id] = sample
        else:
            seconds[function_id] = known + (sample - known) * FASTER_WEIGHT

    def _remember(self, function_id: bytes, sample: float) -> None:
        seconds = self._seconds
        if len(seconds) >= FUNCTIONS_KEPT:
            del seconds[next(iter(seconds))]
        seconds[function_id] = sample

    def slowest_ahead(self, queue: ReadyQueue) -> float | None:
        """The pace of the slowest function among the next tasks of the queue's clients, or None when one of them
        was never measured: how deep a worker's queue may be for what dispatch takes next (prefetch.py)."""
        seconds = self._seconds
        slowest = 0.0
        for record in queue.next_records():
            pace = seconds.get(record.signature.function_id)
            if pace is None:
                return None
            if pace > slowest:
                slowest = pace
        return slowest

    def batch(self, records: list[TaskRecord]) -> int:
        """The fewest of these tasks an idle worker should get: `BATCH_SECONDS` at the slowest of their functions'
        paces; 1 (water filling) when any of them was never measured."""
        seconds = self._seconds
        if not seconds:
            return 1
        slowest = 0.0
        signature = None
        for record in records:  # a batch is mostly one group: one signature, one lookup
            if record.signature is not signature:
                signature = record.signature
                pace = seconds.get(signature.function_id)
                if pace is None:
                    return 1
                if pace > slowest:
                    slowest = pace
        if slowest <= 0.0:
            return max(1, len(records))
        return max(1, int(BATCH_SECONDS / slowest))


def _ends(results: m.TaskResults) -> list[int]:
    """The first and last task of each kind of outcome that ran (succeeded, stored, raised), which say what the
    message's tasks ran: a task that raised ran as long as it took, and a function whose tasks all fail gets a
    pace too (else its tasks stay held as never measured, FIRST_DEPTH deep)."""
    ends: list[int] = []
    if results.succeeded_ids:
        ends += (results.succeeded_ids[0], results.succeeded_ids[-1])
    if results.stored:
        ends += (results.stored[0].task_id, results.stored[-1].task_id)
    if results.failures:
        raised = [failure.task_id for failure in results.failures if failure.kind == m.FailureKind.RAISED]
        if raised:
            ends += (raised[0], raised[-1])
    return ends
