"""pytest plugin: run dask's own test modules with every compute on one real Scaler cluster.

    python -m pytest -p tests.dask_suite.plugin --dask-suite-report=out.json .../dask/tests/test_delayed.py

At session start it starts a SchedulerClusterCombo (2 workers) and points dask's named schedulers and
its collections' default getters at `scaler.get` (see `routing.py`), through a counter of the graphs
that went that way; at the end it stops the cluster and writes, for each test, its outcome, the first
line of its failure and the graphs it sent. A run whose computes bypassed Scaler shows few graphs.
Graphs that tests hand to dask's own schedulers themselves (`dask.get(graph, keys)`,
`scheduler=dask.threaded.get`) are counted apart, as `local_graphs`.

`--dask-suite-scheduler=multiprocessing` routes the same computes to `dask.multiprocessing.get`
instead, and starts no cluster: a failure that also happens there comes from running tasks in other
processes, not from Scaler.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.dask_suite.routing import Routing, route_dask_to

SCHEDULERS = ("scaler", "multiprocessing")
OUTSIDE_TESTS = "<collection>"  # computes made while test modules were imported
WORKERS = 2


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dask-suite", "dask's own tests routed to one scheduler")
    group.addoption(
        "--dask-suite-scheduler", choices=SCHEDULERS, default="scaler",
        help="where every compute goes: scaler.get on a cluster started here, or dask.multiprocessing.get",
    )
    group.addoption("--dask-suite-report", default=None, help="write each test's outcome and graph count here (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(DaskSuiteSession(config), "dask-suite-session")


class CountingGet:
    """A dask get function (or dask's `get_async`) that counts, per test, the graphs it passes on to `target`."""

    def __init__(self, target: Callable) -> None:
        self.target = target
        self.current_test = OUTSIDE_TESTS
        self.graphs_by_test: dict[str, int] = {}
        self._lock = threading.Lock()  # tests compute from threads of their own too

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.graphs_by_test[self.current_test] = self.graphs_by_test.get(self.current_test, 0) + 1
        return self.target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"CountingGet({getattr(self.target, '__module__', '?')}.{getattr(self.target, '__name__', '?')})"


class DaskSuiteSession:
    def __init__(self, config: pytest.Config) -> None:
        self.scheduler: str = config.getoption("--dask-suite-scheduler")
        self.report_path: str | None = config.getoption("--dask-suite-report")
        self.cluster: Any = None
        self.client: Any = None
        self.counting_get: CountingGet | None = None
        self.local_runs: CountingGet | None = None  # graphs run by dask's own schedulers meanwhile
        self.routing = Routing()
        self.results: dict[str, dict[str, Any]] = {}
        self.started = time.monotonic()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.counting_get = CountingGet(self._start_target())
        route_dask_to(self.counting_get, self.routing)
        if self.scheduler == "scaler":
            self._count_local_runs()

    def _count_local_runs(self) -> None:
        """Every local dask scheduler runs a graph through `get_async`, bound by name in these modules."""
        import dask.local
        import dask.multiprocessing
        import dask.threaded

        self.local_runs = CountingGet(dask.local.get_async)
        for module in (dask.local, dask.threaded, dask.multiprocessing):
            self.routing.replaced.append((module, "get_async", module.get_async))
            module.get_async = self.local_runs  # type: ignore[attr-defined,assignment]

    def _start_target(self) -> Callable:
        if self.scheduler == "multiprocessing":
            import dask.multiprocessing

            return dask.multiprocessing.get

        import scaler
        from scaler import Client, SchedulerClusterCombo
        from scaler.compat.dask import use

        self.cluster = SchedulerClusterCombo(n_workers=WORKERS, logging_level="WARNING")
        self.client = Client(address=self.cluster.get_address())
        use(self.client)
        return scaler.get

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Test modules import more of dask (dask.array.linalg, ...): reroute what they brought in."""
        assert self.counting_get is not None
        route_dask_to(self.counting_get, self.routing)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        counters = [counter for counter in (self.counting_get, self.local_runs) if counter is not None]
        for counter in counters:
            counter.current_test = item.nodeid
        self.results.setdefault(item.nodeid, {"outcome": "passed", "message": "", "seconds": 0.0})
        yield
        for counter in counters:
            counter.current_test = OUTSIDE_TESTS

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        result = self.results.setdefault(report.nodeid, {"outcome": "passed", "message": "", "seconds": 0.0})
        result["seconds"] += report.duration
        outcome = _outcome_of(report)
        if outcome is not None and _RANK[outcome] > _RANK[result["outcome"]]:
            result["outcome"] = outcome
            result["message"] = _first_line_of_failure(report) if outcome in ("failed", "error") else ""

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:  # a module that cannot even be imported must show, not vanish
            self.results[report.nodeid] = {
                "outcome": "error", "message": _first_line_of_failure(report), "seconds": 0.0,
            }

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.routing.restore()
        try:
            if self.report_path is not None:
                self._write_report()
        finally:
            self._stop_cluster()

    def _write_report(self) -> None:
        assert self.counting_get is not None
        graphs = dict(self.counting_get.graphs_by_test)
        local_graphs = dict(self.local_runs.graphs_by_test) if self.local_runs is not None else {}
        tests = {
            node_id: {**result, "graphs": graphs.pop(node_id, 0), "local_graphs": local_graphs.get(node_id, 0)}
            for node_id, result in sorted(self.results.items())
        }
        report = {
            "scheduler": self.scheduler,
            "seconds": time.monotonic() - self.started,
            "graphs_outside_tests": graphs.pop(OUTSIDE_TESTS, 0) + sum(graphs.values()),
            "tests": tests,
        }
        with open(self.report_path, "w", encoding="utf-8") as report_file:  # type: ignore[arg-type]
            json.dump(report, report_file, indent=1)

    def _stop_cluster(self) -> None:
        from scaler.compat.dask import use

        use.reset()
        if self.client is not None:
            self.client.disconnect()
            self.client = None
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None


# A test's outcome is the worst of its phases: a failing teardown fails a passing test.
_RANK: dict[str, int] = {"passed": 0, "skipped": 1, "xfailed": 1, "xpassed": 2, "failed": 3, "error": 3}


def _outcome_of(report: pytest.TestReport) -> str | None:
    if report.failed:
        return "failed" if report.when == "call" else "error"
    if report.skipped:
        return "xfailed" if hasattr(report, "wasxfail") else "skipped"
    if report.when == "call":
        return "xpassed" if hasattr(report, "wasxfail") else "passed"
    return None


def _first_line_of_failure(report: pytest.TestReport | pytest.CollectReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else ""
