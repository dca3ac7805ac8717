"""Which of the tasks a Symphony worker holds go to Symphony now: base concurrency, and nested tasks first.

A pure core (no sockets, no SDK): the worker tells it what arrived, started, finished, was cancelled or
released, and asks it what to forward. The rules, as document 004 describes `--base-concurrency`:

- at most `base_concurrency` unnested tasks (nesting depth 0) are in Symphony at once;
- nested tasks (depth > 0) go at once, whatever the base concurrency: their parents hold Symphony
  slots while they wait for them, so holding them back could deadlock. Deeper ones go first;
- a task the scheduler marked `reportStart` is announced (TaskStarted) and goes once the scheduler
  answers; it holds its slot meanwhile, and goes back to the scheduler if no answer comes in time.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools


class Stage(enum.Enum):
    QUEUED = "queued"  # held here, not sent anywhere
    ANNOUNCED = "announced"  # TaskStarted sent, waiting for the scheduler's answer
    FORWARDED = "forwarded"  # in Symphony; its result will come back
    ABANDONED = "abandoned"  # force-cancelled while in Symphony: its result, when it comes, is dropped


@dataclasses.dataclass
class _Held:
    task_id: int
    depth: int
    report_start: bool
    order: int
    stage: Stage = Stage.QUEUED
    announced_at: float = 0.0


@dataclasses.dataclass(frozen=True)
class Ready:
    """Tasks to act on now: announce these (send TaskStarted), forward those to Symphony."""

    announce: list[int]
    forward: list[int]


class ForwardingQueue:
    def __init__(self, base_concurrency: int, start_answer_seconds: float = 30.0) -> None:
        if isinstance(base_concurrency, bool) or not isinstance(base_concurrency, int) or base_concurrency < 1:
            raise ValueError(f"base concurrency must be a whole number of at least 1, got {base_concurrency!r}")
        self._base = base_concurrency
        self._start_answer_seconds = start_answer_seconds
        self._tasks: dict[int, _Held] = {}
        self._order = itertools.count()
        # Unnested tasks announced or in Symphony (abandoned ones too: Symphony still runs them).
        self._base_in_use = 0

    # ------------------------------------------------------------------------------------------ events

    def add(self, task_id: int, depth: int, report_start: bool) -> None:
        if task_id not in self._tasks:
            self._tasks[task_id] = _Held(task_id, depth, report_start, next(self._order))

    def take_ready(self, now: float) -> Ready:
        """Move what may go now out of the queue: nested tasks all, unnested ones up to the base concurrency."""
        queued = [held for held in self._tasks.values() if held.stage is Stage.QUEUED]
        # Deeper first; among nested tasks the newest first (the children of the latest wait), else oldest first.
        queued.sort(key=lambda held: (-held.depth, -held.order if held.depth else held.order))
        announce, forward = [], []
        for held in queued:
            if held.depth == 0:
                if self._base_in_use >= self._base:
                    continue
                self._base_in_use += 1
            if held.report_start:
                held.stage, held.announced_at = Stage.ANNOUNCED, now
                announce.append(held.task_id)
            else:
                held.stage = Stage.FORWARDED
                forward.append(held.task_id)
        return Ready(announce, forward)

    def on_start_answer(self, task_ids: list[int]) -> list[int]:
        """The scheduler's TaskStarted: those of its ids we announced go to Symphony now."""
        forward = []
        for task_id in task_ids:
            held = self._tasks.get(task_id)
            if held is not None and held.stage is Stage.ANNOUNCED:
                held.stage = Stage.FORWARDED
                forward.append(task_id)
        return forward

    def unanswered(self, now: float) -> list[int]:
        """Announced tasks the scheduler did not answer in time: they leave (hand them back as `returned`)."""
        late = [
            held.task_id for held in self._tasks.values()
            if held.stage is Stage.ANNOUNCED and now - held.announced_at > self._start_answer_seconds
        ]
        for task_id in late:
            self._drop(task_id)
        return late

    def finish(self, task_id: int) -> bool:
        """Symphony answered for this task; True if its outcome is to be reported (it was not abandoned)."""
        held = self._tasks.get(task_id)
        if held is None or held.stage not in (Stage.FORWARDED, Stage.ABANDONED):
            return False
        self._drop(task_id)
        return held.stage is Stage.FORWARDED

    def cancel(self, task_id: int, force: bool) -> Stage | None:
        """What a cancel finds: QUEUED or ANNOUNCED (now gone: report it canceled), FORWARDED (running:
        with `force` it is abandoned and reported canceled, otherwise the cancel is refused), or None."""
        held = self._tasks.get(task_id)
        if held is None or held.stage is Stage.ABANDONED:
            return None
        stage = held.stage
        if stage is Stage.FORWARDED:
            if force:
                held.stage = Stage.ABANDONED
        else:
            self._drop(task_id)
        return stage

    def release(self, task_ids: list[int]) -> list[int]:
        """The scheduler takes back what has not started (load balancing): the ids given back."""
        released = [
            task_id for task_id in task_ids
            if task_id in self._tasks and self._tasks[task_id].stage in (Stage.QUEUED, Stage.ANNOUNCED)
        ]
        for task_id in released:
            self._drop(task_id)
        return released

    def fail_forwarded(self) -> list[int]:
        """Symphony lost every task it had (the session broke): the ids that were reported as running there."""
        lost = [held.task_id for held in self._tasks.values() if held.stage is Stage.FORWARDED]
        for held in [h for h in self._tasks.values() if h.stage in (Stage.FORWARDED, Stage.ABANDONED)]:
            self._drop(held.task_id)
        return lost

    def _drop(self, task_id: int) -> None:
        held = self._tasks.pop(task_id)
        if held.depth == 0 and held.stage is not Stage.QUEUED:
            self._base_in_use -= 1

    # ------------------------------------------------------------------------------------------ state

    def stage_of(self, task_id: int) -> Stage | None:
        held = self._tasks.get(task_id)
        return None if held is None else held.stage

    @property
    def held(self) -> int:
        """Tasks the scheduler counts as ours (abandoned ones are no longer)."""
        return sum(1 for held in self._tasks.values() if held.stage is not Stage.ABANDONED)

    @property
    def in_symphony(self) -> int:
        return sum(1 for held in self._tasks.values() if held.stage in (Stage.FORWARDED, Stage.ABANDONED))

    @property
    def base_in_use(self) -> int:
        return self._base_in_use
