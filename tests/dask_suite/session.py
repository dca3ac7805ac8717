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
import threading
import time

from tests.conftest import BACKGROUND_PIDS, REPO_ROOT
from tests.dask_suite.selection import DESELECTED

# Upper bound against a hang, not an expectation: the child's own tests time out after 120 s each.
SESSION_TIMEOUT_SECONDS = 900
# The sessions run beside the rest of the suite, which mostly waits (on heartbeats, timeouts, round trips):
# at a lower priority they take the cores it leaves idle, and do not slow the tests that keep them busy.
BACKGROUND_NICENESS = 10
# Set by the xdist controller for its workers: the directory where it starts the sessions, one folder each.
HANDOFF_VARIABLE = "SCALER_TESTS_DASK_SESSIONS"
_RETURNCODE_FILE = "returncode"
_PID_FILE = "pid"


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

    def __init__(self, node_ids: list[str], scheduler: str, directory: str | None = None) -> None:
        """In `directory` (made here) if given, and then its outcome is written there for SharedSession."""
        self.scheduler = scheduler
        # Short: it is also the session's TMPDIR (below), under which the workers make their ipc sockets.
        if directory is None:
            self.directory = tempfile.mkdtemp(prefix=f"sds-{scheduler[0]}-")
        else:
            os.mkdir(directory)
            self.directory = directory
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
        if directory is not None:
            _write_atomically(os.path.join(self.directory, _PID_FILE), str(self.process.pid))
            threading.Thread(target=self._write_returncode, name=f"dask-suite-{scheduler}", daemon=True).start()

    def _write_returncode(self) -> None:
        """Once the session exits, its code, for the worker that reads the outcome (SharedSession)."""
        code = self.process.wait()
        if os.path.isdir(self.directory):
            _write_atomically(os.path.join(self.directory, _RETURNCODE_FILE), str(code))

    def report(self, timeout: float = SESSION_TIMEOUT_SECONDS) -> dict:
        """Wait for the session (at most `timeout` seconds) and return its JSON report; AssertionError if it
        hung or did not finish its session."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"pytest over dask's tests still ran after {timeout:g} s:\n{self.output()}") from None
        return _finished_report(self.process.returncode, self.directory)

    def output(self) -> str:
        return _output(self.directory)

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


def start_session(node_ids: list[str], scheduler: str) -> DaskTestSession | SharedSession:
    """Start the session through `scheduler` over `node_ids` (once); later calls return the same one.

    In an xdist worker, the session the controller started (start_for_workers)."""
    handoff = os.environ.get(HANDOFF_VARIABLE)
    if handoff and os.environ.get("PYTEST_XDIST_WORKER"):
        return SharedSession(os.path.join(handoff, scheduler))
    if scheduler not in _started:
        _started[scheduler] = DaskTestSession(node_ids, scheduler, None if handoff is None else os.path.join(
            handoff, scheduler))
    return _started[scheduler]


def start_scaler_session(modules: list[str]) -> DaskTestSession | SharedSession:
    return start_session(modules, "scaler")


def start_multiprocessing_session(listed_failures: list[str]) -> DaskTestSession | SharedSession:
    """The listed failures again, through dask.multiprocessing.get: they must fail there too."""
    return start_session(sorted(listed_failures), "multiprocessing")


# The test of test_dask_suite.py that reads the dask.multiprocessing.get session; every other one reads scaler.get's.
MULTIPROCESSING_TEST = "test_every_listed_failure_also_fails_under_dask_multiprocessing"


def start_for_workers(node_ids: list[str]) -> None:
    """In the xdist controller, once a worker has collected `node_ids`: start the sessions its tests of
    test_dask_suite.py read, for whichever worker runs them."""
    from tests.dask_suite.expected_failures import EXPECTED_FAILURES
    from tests.dask_suite.selection import MODULES

    names = [node_id.split("::", 1)[1] for node_id in node_ids if node_id.split("::", 1)[0].endswith(
        "test_dask_suite.py") and "::" in node_id]
    if any(not name.startswith(MULTIPROCESSING_TEST) for name in names):
        start_scaler_session(list(MODULES))
    if any(name.startswith(MULTIPROCESSING_TEST) for name in names):
        start_multiprocessing_session(list(EXPECTED_FAILURES))


class SharedSession:
    """A session the xdist controller started in `directory`, read from a worker."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def report(self, timeout: float = SESSION_TIMEOUT_SECONDS) -> dict:
        """Wait for the session's end (at most `timeout` seconds) and return its JSON report; AssertionError if
        it was never started, hung or did not finish its session."""
        deadline = time.monotonic() + timeout
        returncode_path = os.path.join(self.directory, _RETURNCODE_FILE)
        while not os.path.exists(returncode_path):
            if not os.path.isdir(self.directory):
                raise AssertionError(f"the xdist controller started no dask session in {self.directory}")
            if time.monotonic() >= deadline:
                self._kill()
                raise AssertionError(
                    f"pytest over dask's tests still ran after {timeout:g} s:\n{_output(self.directory)}"
                )
            time.sleep(0.5)
        with open(returncode_path, encoding="utf-8") as code:
            return _finished_report(int(code.read()), self.directory)

    def _kill(self) -> None:
        try:
            with open(os.path.join(self.directory, _PID_FILE), encoding="utf-8") as pid:
                os.killpg(int(pid.read()), signal.SIGKILL)
        except (OSError, ValueError):
            pass

    def stop(self) -> None:
        """The controller stops the session and removes its directory at the end of the run."""


def _finished_report(returncode: int, directory: str) -> dict:
    assert returncode in (0, 1), f"pytest over dask's tests did not finish its session:\n{_output(directory)}"
    with open(os.path.join(directory, "report.json"), encoding="utf-8") as report_file:
        return json.load(report_file)


def _output(directory: str) -> str:
    with open(os.path.join(directory, "output.txt"), encoding="utf-8", errors="replace") as output:
        return output.read()[-5000:]


def _write_atomically(path: str, text: str) -> None:
    with open(path + ".part", "w", encoding="utf-8") as part:
        part.write(text)
    os.replace(path + ".part", path)


def stop_sessions() -> None:
    for session in _started.values():
        session.stop()
    _started.clear()
