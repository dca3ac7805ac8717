"""joblib's own tests of its Parallel backends (joblib/test/test_parallel.py, shipped with joblib) on "scaler".

pytest runs joblib's module in a child process with tests/joblib_suite/plugin.py, against one real
cluster started here; every test parameterized with the "scaler" backend must pass, except the ones
listed, with their reasons, in tests/joblib_suite/expected_failures.py.
"""

from __future__ import annotations

import json
import pathlib
import runpy
import subprocess
import sys
import time

import joblib
import pytest

from scaler import SchedulerClusterCombo
from scaler.scheduler.config import default_monitor_address
from scaler.ui.feed import MonitorSubscriber

SUITE_DIRECTORY = pathlib.Path(__file__).parents[1] / "joblib_suite"
EXPECTED_FAILURES: dict[str, str] = runpy.run_path(str(SUITE_DIRECTORY / "expected_failures.py"))["EXPECTED_FAILURES"]

# joblib 1.6.0 parameterizes 98 of its tests with "scaler": 78 by name, 20 with a ScalerBackend instance.
# Fewer than the named ones means joblib's backend lists no longer pick it up, and the run proves little.
MINIMUM_SCALER_TESTS = 78
# A hang is cut at this, so it shows as the failure of one test rather than of the whole run.
PER_TEST_TIMEOUT_SECONDS = 60
RUN_TIMEOUT_SECONDS = 600
# As few workers as joblib's tests need (n_jobs=2 at most where it matters), so that a batch a test left
# running holds up the next test: joblib's timeout and abandoned-generator tests count on the backend to
# stop running batches (ScalerBackend.abort_everything), as loky does. With more workers than that, one
# left running (a sleep(30) in test_parallel_unordered_generator_returns_fastest_first[scaler-2]) hid on
# a spare worker, and the same test with n_jobs=4 failed only on a cluster of two.
WORKERS = 2


def finished_tasks(address: str) -> int:
    with MonitorSubscriber(default_monitor_address(address)) as monitor:
        snapshot = monitor.receive(timeout_seconds=10)
    assert snapshot is not None, "the scheduler's monitor sent nothing"
    return snapshot.tasks.finished


@pytest.mark.timeout(RUN_TIMEOUT_SECONDS + 60)
def test_joblibs_own_parallel_tests_pass_on_the_scaler_backend(
    tmp_path: pathlib.Path, python_env: dict[str, str]
) -> None:
    report_path = tmp_path / "outcomes.json"
    # An empty configuration file: not this repository's (its timeout and options), nor one found above joblib.
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    with SchedulerClusterCombo(n_workers=WORKERS, logging_level="WARNING") as cluster:
        environment = dict(python_env, SCALER_ADDRESS=cluster.get_address())
        started = time.monotonic()
        completed = subprocess.run(
            [
                sys.executable, "-m", "pytest", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                "-p", "tests.joblib_suite.plugin", "-p", "no:cacheprovider",
                "--timeout", str(PER_TEST_TIMEOUT_SECONDS), "--scaler-report", str(report_path),
                "-q", "-rfE", "--durations=5", "--pyargs", "joblib.test.test_parallel",
            ],
            cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS, check=False,
        )
        wall_seconds = time.monotonic() - started
        tasks = finished_tasks(cluster.get_address())
    output = completed.stdout[-6000:] + completed.stderr[-3000:]
    assert completed.returncode in (0, 1), f"pytest did not run the tests (exit {completed.returncode}):\n{output}"
    outcomes: dict[str, str] = json.loads(report_path.read_text())
    ran = {name for name, outcome in outcomes.items() if outcome in ("passed", "failed")}
    failed = {name for name, outcome in outcomes.items() if outcome == "failed"}
    unlisted = sorted(failed - EXPECTED_FAILURES.keys())
    print(
        f"joblib {joblib.__version__} test_parallel.py on scaler: {len(ran)} tests ran, "
        f"{len(ran) - len(failed)} passed, {len(failed)} failed ({len(unlisted)} not listed), "
        f"{tasks} tasks on the cluster, {wall_seconds:.0f} s"
    )
    assert len(ran) >= MINIMUM_SCALER_TESTS, f"only {len(ran)} scaler-parameterized tests ran:\n{output}"
    assert tasks >= len(ran) // 2, f"only {tasks} tasks reached the cluster: the tests did not run on Scaler"
    assert not unlisted, f"failures not listed in expected_failures.py: {unlisted}\n{output}"
    assert EXPECTED_FAILURES.keys() - failed == set(), "listed failures that passed (or did not run): unlist them"
