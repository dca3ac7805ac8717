"""TaskSignature: what the tasks of one TaskGroup share, typed once for every role that builds groups."""

from __future__ import annotations

import dataclasses

from scaler.protocol.messages import TaskGroup


@dataclasses.dataclass(frozen=True, slots=True)
class TaskSignature:
    """The function, argument layout and options common to the tasks of a group.

    Clients group consecutive tasks of one signature into one TaskGroup; the scheduler keeps one
    instance per submitted group, shared by its tasks, and regroups by it when it dispatches.
    """

    function_id: bytes
    args_per_task: int
    # The last len(keywords) arguments of each task are passed by these names.
    keywords: tuple[str, ...] = ()
    # Object holding the serializer of the arguments and results; empty means the default one.
    serializer_id: bytes = b""
    # > 0: submitted from inside a task (set by the submitting client); such tasks jump the queue, and
    # workers run the deepest first.
    nesting_depth: int = 0
    profiling: bool = False
    # Only workers whose tags include all of these run the tasks (TaskGroup.requiredTags).
    # Sorted, without repeats.
    required_tags: tuple[str, ...] = ()
    # > 0: how long the tasks may wait for a worker with those tags (TaskGroup.waitForTagsMs).
    wait_for_tags_ms: int = 0
    # Higher first among the ready tasks of one client (TaskGroup.priority).
    priority: int = 0
    # Send what the tasks print to their client (TaskGroup.streamOutput).
    stream_output: bool = False
    # The results stay on the cluster until the client deletes them (TaskGroup.keepResults).
    keep_results: bool = False
    # Kept results stay in the workers' stores whatever their size (TaskGroup.keepInStores).
    keep_in_stores: bool = False

    @classmethod
    def of_group(cls, group: TaskGroup) -> TaskSignature:
        return cls(
            function_id=group.function_id,
            args_per_task=group.args_per_task,
            keywords=tuple(group.keywords),
            serializer_id=group.serializer_id,
            nesting_depth=group.nesting_depth,
            profiling=group.profiling,
            required_tags=tuple(sorted(set(group.required_tags))) if group.required_tags else (),
            wait_for_tags_ms=group.wait_for_tags_ms,
            priority=group.priority,
            stream_output=group.stream_output,
            keep_results=group.keep_results,
            keep_in_stores=group.keep_in_stores,
        )

    def new_group(self, report_start: bool = False) -> TaskGroup:
        """An empty group of this signature, for the caller to append task ids and arguments to."""
        return TaskGroup(
            function_id=self.function_id,
            args_per_task=self.args_per_task,
            keywords=self.keywords,
            task_ids=[],
            args=[],
            serializer_id=self.serializer_id,
            nesting_depth=self.nesting_depth,
            profiling=self.profiling,
            report_start=report_start,
            required_tags=self.required_tags,
            wait_for_tags_ms=self.wait_for_tags_ms,
            priority=self.priority,
            stream_output=self.stream_output,
            keep_results=self.keep_results,
            keep_in_stores=self.keep_in_stores,
        )
