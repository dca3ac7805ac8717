"""`--dist loadfile` for pytest-xdist, except that a few test files run first and alone: no other worker runs a
test meanwhile.

They are the files whose tests time what they check with no say of ours: joblib's own tests (a `timeout=10`, a
`dt < 20` around sleeps of 10 s, results that must come back before a sleep of 30 s ends). Next to another
worker's tests on two cores they failed in two full runs of three; alone they take about 20 s of the run.
tests/conftest.py makes this the scheduler of `--dist loadfile`, the README's default.
"""

from __future__ import annotations

from typing import Any, Callable, Collection

from xdist.scheduler import LoadFileScheduling

# Test files that run alone, as the ends of their node ids (paths relative to the root directory).
ALONE = ("tests/integration/test_joblib_suite.py",)


def is_alone(scope: str, alone: Collection[str] = ALONE) -> bool:
    """Whether a file's node id (e.g. `tests/integration/test_joblib_suite.py`) names a file that runs alone."""
    return any(scope == path or scope.endswith("/" + path) for path in alone)


class AloneFirstScheduling(LoadFileScheduling):
    """One file per work unit, as `--dist loadfile`; the ALONE files first, one at a time, each on one worker while
    the others wait, then the rest as usual.

    The worker that runs an alone file gets the next unit with it: an xdist worker runs a test only once it knows
    the one after (or is told to stop), so a file of one test given alone would wait forever.

    What else would run beside an alone file from the controller (dask's own test sessions) waits for it too:
    `when_alone_done`.
    """

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self._after_alone: list[Callable[[], None]] = []
        self._alone_done = False

    def when_alone_done(self, action: Callable[[], None], node_ids: Collection[str]) -> None:
        """Call `action` once the alone files among `node_ids` (a worker's collection) have run; at once if none."""
        if self._alone_done or not any(is_alone(node_id.split("::", 1)[0]) for node_id in node_ids):
            action()
        else:
            self._after_alone.append(action)

    def _alone_running(self) -> bool:
        return any(
            not all(unit.values())
            for workload in self.assigned_work.values()
            for scope, unit in workload.items()
            if is_alone(scope)
        )

    def _assign_work_unit(self, node: Any) -> None:
        if self._alone_running():
            return  # the others wait: mark_test_complete hands them work once it is done
        scope = next((scope for scope in self.workqueue if is_alone(scope)), None)
        if scope is not None:
            if any(self._pending_of(workload) for workload in self.assigned_work.values()):
                return  # an alone file starts once every worker is idle
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)
            if not self.workqueue:
                return
        super()._assign_work_unit(node)

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        """As loadfile's, and the workers left without work while a file ran alone get some as soon as it ends."""
        was_alone = self._alone_running()
        super().mark_test_complete(node, item_index, duration)
        if was_alone and not self._alone_running():
            if not any(is_alone(scope) for scope in self.workqueue):
                self._alone_done = True
                actions, self._after_alone = self._after_alone, []
                for action in actions:
                    action()
            for other in self.nodes:
                if other is not node:
                    self._reschedule(other)
