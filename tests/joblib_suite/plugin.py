"""pytest plugin: joblib's own tests of its Parallel backends, run against the "scaler" backend on one cluster.

    python -m pytest -p tests.joblib_suite.plugin --pyargs joblib.test.test_parallel

(tests/integration/test_joblib_suite.py runs it so, and checks the outcome against
expected_failures.py). What it does:

- registers "scaler" before joblib's test module is imported: the module builds its backend
  parameter lists from joblib's registry at import time, so "scaler", and an instance of
  ScalerBackend, join every list made from it;
- keeps only the tests parameterized with the "scaler" backend (by name or instance), and deselects
  the rest, which run on joblib's own backends;
- points every Parallel(backend="scaler") at one cluster, the scheduler in SCALER_ADDRESS, else a
  SchedulerClusterCombo started here, the way a user does: a Client made here and given to
  `use(client)`. joblib's forked children ("multiprocessing") reach it through that choice, which
  connects anew there; loky's new interpreters, which `use` cannot reach, through SCALER_ADDRESS;
- runs the tests back to back on that cluster, as a user's program would, clearing nothing between
  them: what a Parallel call left behind when joblib gave up on it (a timeout, an error, an abandoned
  generator) is the backend's to stop, and a leftover slows the next test down or fails it;
- with `--scaler-report PATH`, writes each selected test's outcome there as JSON.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

import scaler.compat.joblib
from scaler import Client, SchedulerClusterCombo
from scaler.compat import cluster_choice

_cluster: SchedulerClusterCombo | None = None
_client: Client | None = None
_outcomes: dict[str, str] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--scaler-report", default=None, help="write each scaler-parameterized test's outcome here (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    global _cluster, _client
    scaler.compat.joblib.register()
    for marker in ("thread_unsafe", "no_cover"):  # joblib's own marks, declared in its repository's setup.cfg
        config.addinivalue_line("markers", f"{marker}: a mark of joblib's test suite")
    if not os.environ.get(cluster_choice.ADDRESS_ENVIRONMENT_VARIABLE):
        _cluster = SchedulerClusterCombo(n_workers=2, logging_level="WARNING")
        os.environ[cluster_choice.ADDRESS_ENVIRONMENT_VARIABLE] = _cluster.get_address()
    _client = Client(address=os.environ[cluster_choice.ADDRESS_ENVIRONMENT_VARIABLE])
    cluster_choice.use(_client)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _cluster, _client
    cluster_choice.use.reset()
    if _client is not None:
        _client.disconnect()
        _client = None
    cluster_choice._shutdown_embedded()  # disconnects the clients the backend made, as at exit
    if _cluster is not None:
        os.environ.pop(cluster_choice.ADDRESS_ENVIRONMENT_VARIABLE, None)
        _cluster.shutdown()
        _cluster = None


def runs_on_scaler(item: pytest.Item) -> bool:
    from scaler.compat.joblib.backend import BACKEND_NAME, ScalerBackend

    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    return any(
        value == BACKEND_NAME if isinstance(value, str) else isinstance(value, ScalerBackend)
        for value in callspec.params.values()
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = [item for item in items if runs_on_scaler(item)]
    deselected = [item for item in items if not runs_on_scaler(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = selected


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    name = report.nodeid.rpartition("::")[2]
    if report.failed:
        _outcomes[name] = "failed"
    elif report.skipped:
        _outcomes.setdefault(name, "skipped")
    elif report.when == "call":
        _outcomes.setdefault(name, "passed")


def pytest_sessionfinish(session: pytest.Session, exitstatus: Any) -> None:
    path = session.config.getoption("--scaler-report")
    if path:
        with open(path, "w") as report:
            json.dump(_outcomes, report, indent=1, sort_keys=True)
