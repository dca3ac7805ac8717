"""pytest plugin for the rewritten tests of distributed's test_client.py (rewrite.py makes the module).

    python -m pytest -p tests.distributed_suite.plugin --distributed-suite-report=out.json test_client_subset.py

At session start it starts a `scaler.compat.dask.distributed.LocalCluster` of 2 workers of one thread,
as distributed's own `client` fixture has 2 workers; `c` and `client` give each test a new synchronous
Client of it (closed after the test), and gen_cluster's tests an asynchronous one (stand_ins.py). At the
end it writes each test's outcome, and the first lines of its failure, to the report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.distributed_suite import stand_ins

WORKERS = 2
WARM_UP_SECONDS = 180  # against a hang: workers start in seconds, longer only on a machine under heavy load


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--distributed-suite-report", default=None, help="write each test's outcome here (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Report(config.getoption("--distributed-suite-report")), "distributed-suite-report")


class Report:
    def __init__(self, path: str | None) -> None:
        self.path = path
        self.tests: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
        if report.failed:  # a failed setup or teardown fails the test too
            entry["outcome"] = "failed" if report.when == "call" else "error"
            entry["message"] = str(report.longrepr)[-3000:]
        elif report.skipped:
            entry["outcome"] = "skipped"
            entry["message"] = str(report.longrepr)
        elif report.when == "call" and hasattr(report, "wasxfail"):
            entry["outcome"] = "xpassed"

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.path is not None:
            with open(self.path, "w", encoding="utf-8") as file:
                json.dump({"tests": self.tests}, file)


@pytest.fixture(scope="session", autouse=True)
def scaler_cluster() -> Iterator[Any]:
    from scaler.compat.dask.distributed import LocalCluster

    with LocalCluster(n_workers=WORKERS, threads_per_worker=1) as cluster:
        _warm_up(cluster)
        stand_ins.set_cluster(cluster)
        yield cluster


def _warm_up(cluster: Any) -> None:
    """Wait until the workers run tasks, so that their start does not count against the first test's time."""
    from scaler.compat.dask.distributed import Client, wait

    with Client(cluster, set_as_default=False) as warming:
        wait(warming.map(abs, range(-WORKERS, 0)), timeout=WARM_UP_SECONDS)


@pytest.fixture
def client(scaler_cluster: Any) -> Iterator[Any]:
    from scaler.compat.dask.distributed import Client

    with Client(scaler_cluster) as test_client:
        yield test_client


@pytest.fixture
def c(client: Any) -> Any:
    return client
