"""dask's own test modules, as installed with dask, with every compute on one real Scaler cluster.

A pytest session in a child process runs the modules chosen in tests/dask_suite/selection.py (which
also says why the others are left out) with tests/dask_suite/plugin.py, which starts a scheduler and 2
workers and points dask's named schedulers and collection getters at `scaler.get`. Its failures must
be exactly those listed in tests/dask_suite/expected_failures.py; a second session, with every
compute on `dask.multiprocessing.get`, shows each listed one fails there too; and each module must
have sent at least its share of graphs through Scaler, so a run that bypassed it cannot pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

dask = pytest.importorskip("dask")

from tests.conftest import REPO_ROOT  # noqa: E402
from tests.dask_suite.expected_failures import EXPECTED_FAILURES  # noqa: E402
from tests.dask_suite.selection import DESELECTED, MODULES  # noqa: E402

# Upper bounds against a hang, not expectations: the child's own tests time out after 120 s each.
SESSION_TIMEOUT_SECONDS = 900
pytestmark = pytest.mark.timeout(SESSION_TIMEOUT_SECONDS + 60)  # a test runs at most one session

DASK_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(dask.__file__)))  # holds the `dask` package
FAILING = ("failed", "error")


def run_dask_tests(node_ids: list[str], scheduler: str, directory: str, environment: dict[str, str]) -> dict:
    """One pytest session over dask's tests `node_ids` with the plugin; its JSON report.

    The session is a process group of its own, so that a hang kills it with its cluster and pools.
    """
    report_path = os.path.join(directory, f"report-{scheduler}.json")
    command = [
        sys.executable, "-m", "pytest", "-q",
        "-c", os.path.join(REPO_ROOT, "tests", "dask_suite", "dask_suite.ini"), "--rootdir", DASK_ROOT,
        "--basetemp", os.path.join(directory, f"basetemp-{scheduler}"),
        "-p", "tests.dask_suite.plugin", f"--dask-suite-scheduler={scheduler}", f"--dask-suite-report={report_path}",
        *[f"--deselect={node_id}" for node_id in DESELECTED],
        *[os.path.join(DASK_ROOT, node_id) for node_id in node_ids],
    ]
    session = subprocess.Popen(
        command, cwd=directory, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = session.communicate(timeout=SESSION_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(session.pid, signal.SIGKILL)
        output, _ = session.communicate()
        text = output.decode(errors="replace")
        pytest.fail(f"pytest over dask's tests still ran after {SESSION_TIMEOUT_SECONDS} s:\n{text[-5000:]}")
    text = output.decode(errors="replace")
    assert session.returncode in (0, 1), f"pytest over dask's tests did not finish its session:\n{text[-5000:]}"
    with open(report_path, encoding="utf-8") as report_file:
        return json.load(report_file)


@pytest.fixture(scope="module")
def dask_environment() -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = REPO_ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    environment.pop("SCALER_ADDRESS", None)  # the plugin's own cluster, never one from outside
    return environment


@pytest.fixture(scope="module")
def scaler_report(tmp_path_factory: pytest.TempPathFactory, dask_environment: dict[str, str]) -> dict:
    directory = str(tmp_path_factory.mktemp("dask-suite-scaler"))
    report = run_dask_tests(list(MODULES), "scaler", directory, dask_environment)
    print(f"scaler.get session: {report['seconds']:.1f} s")  # shown with -s or -rP: the note quotes these
    print(module_table(report))
    return report


@pytest.fixture(scope="module")
def multiprocessing_report(tmp_path_factory: pytest.TempPathFactory, dask_environment: dict[str, str]) -> dict:
    directory = str(tmp_path_factory.mktemp("dask-suite-multiprocessing"))
    listed = sorted(EXPECTED_FAILURES)
    report = run_dask_tests(listed, "multiprocessing", directory, dask_environment)
    print(f"dask.multiprocessing.get session over the {len(listed)} listed failures: {report['seconds']:.1f} s")
    return report


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
