"""One pytest session over dask's own tests, in a child process: started, then waited for.

The session through `scaler.get` takes minutes (about four of them CPU), so tests/integration/conftest.py
starts it, and the one through `dask.multiprocessing.get`, as soon as collection shows that
test_dask_suite.py will run them, and the rest of the suite runs meanwhile, at a higher priority. The
child is a process group of its own: a hang, or the end of the parent session, kills it with its cluster
and pools.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from tests.conftest import BACKGROUND_PIDS, REPO_ROOT
from tests.dask_suite.selection import DESELECTED

# Upper bound against a hang, not an expectation: the child's own tests time out after 120 s each.
SESSION_TIMEOUT_SECONDS = 900
# The sessions run beside the rest of the suite, which mostly waits (on heartbeats, timeouts, round trips):
# at a lower priority they take the cores it leaves idle, and do not slow the tests that keep them busy.
BACKGROUND_NICENESS = 10


def dask_root() -> str:
    import dask

    return os.path.dirname(os.path.dirname(os.path.abspath(dask.__file__)))  # holds the `dask` package


def child_environment() -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = REPO_ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    environment.pop("SCALER_ADDRESS", None)  # the plugin's own cluster, never one from outside
    return environment


class DaskTestSession:
    """pytest over dask's tests `node_ids` with tests/dask_suite/plugin.py routing every compute to `scheduler`."""

    def __init__(self, node_ids: list[str], scheduler: str) -> None:
        self.scheduler = scheduler
        # Short: it is also the session's TMPDIR (below), under which the workers make their ipc sockets.
        self.directory = tempfile.mkdtemp(prefix=f"sds-{scheduler[0]}-")
        self.report_path = os.path.join(self.directory, "report.json")
        root = dask_root()
        nice = shutil.which("nice")
        command = [
            *([nice, "-n", str(BACKGROUND_NICENESS)] if nice else []),  # it execs: the pid stays the session's
            sys.executable, "-m", "pytest", "-q",
            "-c", os.path.join(REPO_ROOT, "tests", "dask_suite", "dask_suite.ini"), "--rootdir", root,
            "--basetemp", os.path.join(self.directory, "basetemp"),
            "-p", "tests.dask_suite.plugin", f"--dask-suite-scheduler={scheduler}",
            f"--dask-suite-report={self.report_path}",
            *[f"--deselect={node_id}" for node_id in DESELECTED],
            *[os.path.join(root, node_id) for node_id in node_ids],
        ]
        self.output_path = os.path.join(self.directory, "output.txt")
        # Everything the session and its cluster put in the temporary directory goes here and is removed with
        # it: dask's disk-based bag shuffles (partd) leave a directory behind per shuffle otherwise.
        environment = child_environment()
        environment["TMPDIR"] = os.path.join(self.directory, "t")
        os.mkdir(environment["TMPDIR"])
        with open(self.output_path, "wb") as output:
            self.process = subprocess.Popen(
                command, cwd=self.directory, env=environment, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        BACKGROUND_PIDS.add(self.process.pid)

    def report(self, timeout: float = SESSION_TIMEOUT_SECONDS) -> dict:
        """Wait for the session (at most `timeout` seconds) and return its JSON report; AssertionError if it
        hung or did not finish its session."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"pytest over dask's tests still ran after {timeout:g} s:\n{self.output()}") from None
        assert self.process.returncode in (0, 1), (
            f"pytest over dask's tests did not finish its session:\n{self.output()}"
        )
        with open(self.report_path, encoding="utf-8") as report_file:
            return json.load(report_file)

    def output(self) -> str:
        with open(self.output_path, encoding="utf-8", errors="replace") as output:
            return output.read()[-5000:]

    def stop(self) -> None:
        """Kill the session's process group if it still runs, and remove its directory."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
        BACKGROUND_PIDS.discard(self.process.pid)
        shutil.rmtree(self.directory, ignore_errors=True)


# The session through scaler.get, once started. Kept here, not in test_dask_suite.py: pytest imports that
# file as a top-level module (tests/integration is no package) and conftest as part of `tests`, so a
# registry there would be two, and the session would run twice.
_started: dict[str, DaskTestSession] = {}


def start_session(node_ids: list[str], scheduler: str) -> DaskTestSession:
    """Start the session through `scheduler` over `node_ids` (once); later calls return the same one."""
    if scheduler not in _started:
        _started[scheduler] = DaskTestSession(node_ids, scheduler)
    return _started[scheduler]


def start_scaler_session(modules: list[str]) -> DaskTestSession:
    return start_session(modules, "scaler")


def start_multiprocessing_session(listed_failures: list[str]) -> DaskTestSession:
    """The listed failures again, through dask.multiprocessing.get: they must fail there too."""
    return start_session(sorted(listed_failures), "multiprocessing")


def stop_sessions() -> None:
    for session in _started.values():
        session.stop()
    _started.clear()
