"""distributed's own client tests, run with one import changed, against scaler.compat.dask.distributed.

The tests are distributed's `distributed/tests/test_client.py` of release source.VERSION, fetched at run
time (source.py: distributed ships no tests in its wheel or sdist, and this repository holds none of its
code). rewrite.py keeps the tests chosen in tests/distributed_suite/selection.py, with every name they
import from `distributed` taken from `scaler.compat.dask.distributed`, as a user's code after the switch;
a pytest session in a child process runs them (plugin.py: their `c` is our Client of a Scaler
LocalCluster of 2 workers). Each chosen test must pass, and every candidate of the file must be either
chosen or excluded with its reason: a newly pinned release cannot add tests that nobody looked at.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("dask")
pytest.importorskip("distributed")  # its test helpers (inc, slowinc, varying, ...) are imported by the tests

from tests.conftest import REPO_ROOT  # noqa: E402
from tests.distributed_suite import source  # noqa: E402
from tests.distributed_suite.rewrite import candidates, subset_module  # noqa: E402
from tests.distributed_suite.selection import CHOSEN, EXCLUDED  # noqa: E402

# Upper bound against a hang, not an expectation; each test in the child has 60 s (and 30 s inside gen_cluster).
SESSION_TIMEOUT_SECONDS = 300
pytestmark = pytest.mark.timeout(SESSION_TIMEOUT_SECONDS + 120)

SETTINGS = """\
# pytest settings for the rewritten tests of distributed (not this repository's)
[pytest]
timeout = 60
addopts = -p no:cacheprovider -p tests.distributed_suite.plugin
filterwarnings = ignore::pytest.PytestUnknownMarkWarning
"""


@pytest.fixture(scope="module")
def test_client_source(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = tmp_path_factory.mktemp("distributed-source")
    try:
        return source.test_client_source(str(directory))
    except source.SourceUnavailable as error:
        pytest.skip(f"distributed {source.VERSION}'s tests could not be fetched: {error}")


@pytest.fixture(scope="module")
def report(test_client_source: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import distributed

    directory = tmp_path_factory.mktemp("distributed-client-tests")
    origin = f"distributed {source.VERSION}'s distributed/tests/test_client.py"
    (directory / "test_client_subset.py").write_text(subset_module(test_client_source, CHOSEN, origin))
    (directory / "pytest.ini").write_text(SETTINGS)
    report_path = directory / "report.json"
    environment = dict(os.environ)
    environment["PYTHONPATH"] = REPO_ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    environment.pop("SCALER_ADDRESS", None)  # the plugin's own cluster, never one from outside
    command = [
        sys.executable, "-m", "pytest", "-q", "-c", str(directory / "pytest.ini"), "--rootdir", str(directory),
        "--basetemp", str(directory / "basetemp"), f"--distributed-suite-report={report_path}",
        str(directory / "test_client_subset.py"),
    ]
    # Its own process group: a hang kills the session with its cluster.
    process = subprocess.Popen(
        command, cwd=directory, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=SESSION_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        hung = output.decode(errors="replace")[-5000:]
        raise AssertionError(f"the session still ran after {SESSION_TIMEOUT_SECONDS} s:\n{hung}") from None
    text = output.decode(errors="replace")
    print(f"distributed {source.VERSION}'s tests against installed distributed {distributed.__version__}:")
    print(text[-3000:])  # shown with -s or -rP
    assert process.returncode in (0, 1) and report_path.exists(), f"the session did not finish:\n{text[-5000:]}"
    return json.loads(report_path.read_text())


def test_every_candidate_is_chosen_or_excluded(test_client_source: str) -> None:
    excluded = [name for names in EXCLUDED.values() for name in names]
    assert len(set(CHOSEN)) == len(CHOSEN) and len(set(excluded)) == len(excluded), "a test is listed twice"
    assert not set(CHOSEN) & set(excluded), f"both chosen and excluded: {sorted(set(CHOSEN) & set(excluded))}"
    found = set(candidates(test_client_source))
    assert found == set(CHOSEN) | set(excluded), (
        f"candidates not listed: {sorted(found - set(CHOSEN) - set(excluded))}; "
        f"listed but not candidates: {sorted(set(CHOSEN) | set(excluded) - found)}"
    )


def test_every_chosen_test_passes(report: dict[str, Any]) -> None:
    outcomes = report["tests"]
    ran = {node_id.split("::", 1)[1].split("[", 1)[0] for node_id in outcomes}
    assert ran == set(CHOSEN), f"chosen but not run: {sorted(set(CHOSEN) - ran)}"
    failing = {node_id: result["message"] for node_id, result in outcomes.items() if result["outcome"] != "passed"}
    assert not failing, "distributed's tests that fail against scaler.compat.dask.distributed:\n" + "\n\n".join(
        f"{node_id}: {message}" for node_id, message in failing.items()
    )
