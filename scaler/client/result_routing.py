"""Which sink each unfinished task's outcome goes to, and the routing of what the scheduler sends back.

Part of the client connection's core (connection_core.py), so only the thread that owns the core (the
client's I/O thread) touches it: the core registers the sink a caller queued with its task when it takes
the task, and hands results, failures, cancels, warnings and profiles to it as they arrive. A task's entry
goes with its outcome.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Iterable, KeysView

from scaler.client.future import ScalerFuture, call_when_all_done, exception_from_failure
from scaler.client.result_sinks import ResultSink
from scaler.protocol import messages as m


class _QuietTasks:
    """The quiet tasks of one graph and the warnings they raised, shared by the graph's futures."""

    def __init__(self, task_ids: list[int]) -> None:
        self._task_ids = task_ids
        self._id_set: set[int] | None = None  # made at the first warning: most graphs never warn
        self.warnings: list[m.TaskWarning] = []

    def holds(self, task_id: int) -> bool:
        if self._id_set is None:
            self._id_set = set(self._task_ids)
        return task_id in self._id_set


class PendingResults:
    """The sink of every task of one client whose outcome has not arrived yet."""

    def __init__(self) -> None:
        self._sinks: dict[int, ResultSink] = {}
        # The quiet tasks of graphs whose futures are not all done, for their warnings.
        self._quiet_graphs: dict[int, _QuietTasks] = {}
        self._graph_counter = itertools.count()
        # Done futures whose results stay in stores (keep=True), while they live: a result lost with its store
        # is made again by the scheduler (PROTOCOL.md §18) and comes again, under a new object id.
        self._kept_in_stores: weakref.WeakValueDictionary[int, ScalerFuture] = weakref.WeakValueDictionary()

    def __len__(self) -> int:
        return len(self._sinks)

    # ------------------------------------------------------------------------------------------ requests taken

    def expect(self, task_id: int, sink: ResultSink) -> None:
        self._sinks[task_id] = sink

    def expect_all(self, task_ids: Iterable[int], sink: ResultSink) -> None:
        self._sinks.update(dict.fromkeys(task_ids, sink))

    def expect_graph(self, futures: dict[int, ScalerFuture], quiet_task_ids: list[int]) -> None:
        """The wanted tasks of a graph, each with its future; the quiet ones only for their warnings.

        The graph's futures share one list for the warnings of its quiet tasks, until every one is done.
        Quiet tasks finish before the tasks that need them, so their warnings are there by the time a
        future that depends on them is done, and the first result() that hands out an outcome issues them.
        """
        self._sinks.update(futures)
        if not quiet_task_ids or not futures:
            return
        quiet = _QuietTasks(quiet_task_ids)
        for future in futures.values():
            future.share_graph_warnings(quiet.warnings)
        key = next(self._graph_counter)
        graphs = self._quiet_graphs
        graphs[key] = quiet
        call_when_all_done(list(futures.values()), lambda: graphs.pop(key, None))

    def expects(self, task_id: int) -> bool:
        return task_id in self._sinks

    @property
    def task_ids(self) -> KeysView[int]:
        """The ids of the tasks waiting (a live view: for looking many up at once)."""
        return self._sinks.keys()

    def fail_one(self, task_id: int, error: BaseException) -> None:
        sink = self._sinks.pop(task_id, None)
        if sink is not None:
            sink.fail(task_id, error)

    def forget(self, task_ids: Iterable[int]) -> None:
        sinks = self._sinks
        for task_id in task_ids:
            sinks.pop(task_id, None)

    # ------------------------------------------------------------------------------------------ messages

    def route(self, results: m.TaskResults) -> None:
        sinks = self._sinks
        if results.warnings:  # before the outcomes: whoever an outcome wakes finds its warnings there
            self._hold_warnings(results.warnings)
        for profile in results.profiles:
            sink = sinks.get(profile.task_id)
            if isinstance(sink, ScalerFuture):
                sink.hold_profile(profile)
        for task_id, payload in zip(results.succeeded_ids, results.payloads):
            sink = sinks.pop(task_id, None)
            if sink is not None:
                sink.deliver(task_id, payload)
        for failure in results.failures:
            if failure.kind == m.FailureKind.NOT_FOUND:
                continue  # an answer to a cancel that came too late; the result went out before it
            sink = sinks.pop(failure.task_id, None)
            if sink is None:
                continue
            if failure.kind == m.FailureKind.CANCELED:
                sink.mark_canceled(failure.task_id)
            else:
                sink.fail(failure.task_id, exception_from_failure(failure))

    def deliver_kept(self, stored: list[m.StoredResult]) -> list[m.StoredResult]:
        """Stored results of futures that keep them (submit(..., keep=True)) complete those futures with where the
        result is, to be read when asked for; returns the other stored results."""
        sinks = self._sinks
        others = []
        for item in stored:
            sink = sinks.get(item.task_id)
            if isinstance(sink, ScalerFuture) and sink.keeps_result:
                del sinks[item.task_id]
                sink.deliver_stored(item)
                self._kept_in_stores[item.task_id] = sink
            elif self._kept_in_stores and item.task_id in self._kept_in_stores:
                self._kept_in_stores[item.task_id].replace_stored(item)  # made again after a loss
            else:
                others.append(item)
        return others

    def refuse_cancels(self, task_ids: list[int]) -> None:
        """The scheduler could not cancel these tasks: they run to the end, and their cancel() says so."""
        for task_id in task_ids:
            sink = self._sinks.get(task_id)
            if isinstance(sink, ScalerFuture):
                sink.refuse_cancel()

    def _hold_warnings(self, task_warnings: list[m.TaskWarning]) -> None:
        sinks = self._sinks
        for warning in task_warnings:
            sink = sinks.get(warning.task_id)
            if sink is not None:
                sink.hold_warning(warning.task_id, warning)
                continue
            for quiet in list(self._quiet_graphs.values()):
                if quiet.holds(warning.task_id):
                    quiet.warnings.append(warning)
                    break

    # ------------------------------------------------------------------------------------------ the end

    def fail_all(self, error: BaseException) -> None:
        """No outcome will come: every waiting caller gets `error` instead of waiting forever."""
        sinks, self._sinks = self._sinks, {}
        for task_id, sink in sinks.items():
            sink.fail(task_id, error)

    def cancel_all(self) -> None:
        sinks, self._sinks = self._sinks, {}
        for task_id, sink in sinks.items():
            sink.mark_canceled(task_id)
