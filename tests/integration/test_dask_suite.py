"""dask's own test modules, as installed with dask, with every compute on one real Scaler cluster.

A pytest session in a child process runs the modules chosen in tests/dask_suite/selection.py (which
also says why the others are left out) with tests/dask_suite/plugin.py, which starts a scheduler and 2
workers and points dask's named schedulers and collection getters at `scaler.get`. Its failures must
be exactly those listed in tests/dask_suite/expected_failures.py; a second session, with every
compute on `dask.multiprocessing.get`, shows each listed one fails there too; and each module must
have sent at least its share of graphs through Scaler, so a run that bypassed it cannot pass. Both
sessions start when collection ends (tests/integration/conftest.py), so that the rest of the suite runs
while they do.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

dask = pytest.importorskip("dask")

from tests.dask_suite.expected_failures import EXPECTED_FAILURES  # noqa: E402
from tests.dask_suite.selection import MODULES  # noqa: E402
from tests.dask_suite.session import (  # noqa: E402
    SESSION_TIMEOUT_SECONDS,
    start_multiprocessing_session,
    start_scaler_session,
    stop_sessions,
)

pytestmark = pytest.mark.timeout(SESSION_TIMEOUT_SECONDS + 60)  # a test waits for at most one session
FAILING = ("failed", "error")


@pytest.fixture(scope="module")
def scaler_report() -> Iterator[dict]:
    try:
        report = start_scaler_session(list(MODULES)).report()
        print(f"scaler.get session: {report['seconds']:.1f} s")  # shown with -s or -rP: the note quotes these
        print(module_table(report))
        yield report
    finally:
        stop_sessions()


@pytest.fixture(scope="module")
def multiprocessing_report() -> Iterator[dict]:
    try:
        report = start_multiprocessing_session(list(EXPECTED_FAILURES)).report()
        print(f"dask.multiprocessing.get session over the {len(EXPECTED_FAILURES)} listed failures: "
              f"{report['seconds']:.1f} s")
        yield report
    finally:
        stop_sessions()


def module_of(node_id: str) -> str:
    return node_id.split("::", 1)[0]


def module_table(report: dict) -> str:
    rows = ["module | tests | passed | failed | graphs on scaler.get | graphs a test gave dask's own get | seconds"]
    for module in MODULES:
        tests = [result for node_id, result in report["tests"].items() if module_of(node_id) == module]
        rows.append(" | ".join(str(cell) for cell in (
            module, len(tests), sum(result["outcome"] == "passed" for result in tests),
            sum(result["outcome"] in FAILING for result in tests), sum(result["graphs"] for result in tests),
            sum(result.get("local_graphs", 0) for result in tests), f"{sum(result['seconds'] for result in tests):.1f}",
        )))
    return "\n".join(rows)


def failures_of(report: dict) -> dict[str, Any]:
    return {node_id: result for node_id, result in report["tests"].items() if result["outcome"] in FAILING}


@pytest.mark.parametrize("module", list(MODULES))
def test_each_module_ran_with_its_graphs_on_scaler(scaler_report: dict, module: str) -> None:
    assert scaler_report["scheduler"] == "scaler"
    tests = {node_id: result for node_id, result in scaler_report["tests"].items() if module_of(node_id) == module}
    assert tests, f"no test of {module} ran"
    graphs = sum(result["graphs"] for result in tests.values())
    assert graphs >= MODULES[module], f"only {graphs} graphs of {module} went through scaler.get"


def test_only_the_listed_tests_fail(scaler_report: dict) -> None:
    failed = failures_of(scaler_report)
    unexpected = {
        node_id: result["message"] for node_id, result in failed.items()
        if node_id not in EXPECTED_FAILURES
    }
    assert not unexpected, f"dask tests failing through scaler.get, a bug in the adapter or in Scaler: {unexpected}"
    passing_now = sorted(node_id for node_id in EXPECTED_FAILURES if node_id not in failed)
    assert not passing_now, f"listed as failing in tests/dask_suite/expected_failures.py but passed: {passing_now}"


def test_every_listed_failure_also_fails_under_dask_multiprocessing(multiprocessing_report: dict) -> None:
    assert multiprocessing_report["scheduler"] == "multiprocessing"
    listed = dict(EXPECTED_FAILURES)
    outcomes = {node_id: multiprocessing_report["tests"].get(node_id, {}).get("outcome") for node_id in listed}
    not_failing = {node_id: outcome for node_id, outcome in outcomes.items() if outcome not in FAILING}
    assert not not_failing, f"listed failures that do not fail under dask.multiprocessing.get: {not_failing}"
    graphs = sum(result["graphs"] for result in multiprocessing_report["tests"].values())
    assert graphs >= len(listed), "the listed tests' computes did not go through dask.multiprocessing.get"
