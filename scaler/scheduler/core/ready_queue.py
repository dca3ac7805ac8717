"""The tasks ready to run that one set of required worker tags (TaskGroup.requiredTags) shares.

The task table keeps one ReadyQueue per tag set, so that dispatch hands each queue only to the workers
whose tags include the set, and a queue no connected worker can serve waits whole without holding up
the others. The empty set (any worker) is just another queue: an untagged task costs one dict lookup.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scaler.scheduler.core.task_record import TaskRecord

# Sorted and without repeats, so that equal sets are equal keys, and ready to go on the wire as they are.
Tags = tuple[str, ...]
NO_TAGS: Tags = ()


class ReadyQueue:
    __slots__ = ("tags", "records", "waiting")

    def __init__(self, tags: Tags) -> None:
        self.tags = tags
        # First out first; finished ones stay (canceled) until take() skips them.
        self.records: collections.deque[TaskRecord] = collections.deque()
        # The unfinished tasks in `records`.
        self.waiting = 0


def describe_tags(tags: Tags | frozenset[str]) -> str:
    """A tag set as users write it, sorted: `{gpu, python}`; the empty set is `{}`."""
    return "{" + ", ".join(sorted(tags)) + "}"
