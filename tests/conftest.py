"""Fixtures shared by the tests: child environments, console scripts, a check that no process leaks, and
under .ci/run the check that the installed wheel, not the source tree, is what the tests import."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Iterator

import cloudpickle
import psutil
import pytest

from tests import installed_scaler, session_tmpdir

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Set by .ci/run, where every system the tests drive (Slurm, chromium, tmux, network namespaces) is
# installed: a test that skips there did not run, so the session fails and names it.
FORBID_SKIPS_VARIABLE = "SCALER_TESTS_FORBID_SKIPS"
_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(f"{report.nodeid}: {report.longrepr[-1] if isinstance(report.longrepr, tuple) else ''}")


@pytest.hookimpl(trylast=True)  # after tests/integration/conftest.py has stopped the background sessions
def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get(FORBID_SKIPS_VARIABLE) == "1" and _skipped:
        sys.stderr.write(f"\n{FORBID_SKIPS_VARIABLE}=1 and {len(_skipped)} tests skipped (they did not run):\n  "
                         + "\n  ".join(_skipped) + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    _stop_shared_dask_sessions()
    left = session_tmpdir.leftovers()
    session_tmpdir.finish()
    if left:
        sys.stderr.write(f"\nthe tests' processes left {len(left)} temporary entries that nobody removes (give "
                         "each an owner, e.g. a tmp_path-based dask temporary_directory):\n  "
                         + "\n  ".join(left) + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ------------------------------------------------------------------------- the xdist controller (README: -n)
# Under pytest-xdist the tests run in worker processes; the controller starts dask's own test sessions
# (tests/dask_suite/session.py) as soon as a worker's collection selects them, so that they run beside the
# rest of the suite whichever worker reads their outcome.


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (the default in pyproject.toml) runs the files of tests/alone_first.py first, alone."""
    global _scheduler
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.alone_first import AloneFirstScheduling

    _scheduler = AloneFirstScheduling(config, log)
    return _scheduler


_scheduler: Any = None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: Any) -> None:
    """Before the workers start, so that they inherit it: where the controller will start the sessions."""
    from tests.dask_suite.session import HANDOFF_VARIABLE

    os.environ[HANDOFF_VARIABLE] = tempfile.mkdtemp(prefix="sds-")  # short: sockets are made under it


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    if node.config.option.collectonly or importlib.util.find_spec("dask") is None:
        return  # test_dask_suite.py skips and says so
    from tests.dask_suite.session import start_for_workers

    if _scheduler is None:
        start_for_workers(ids)
    else:  # not beside joblib's suite, which runs alone first: they would take its time
        _scheduler.when_alone_done(lambda: start_for_workers(ids), ids)


def _is_xdist_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and config.pluginmanager.has_plugin("dsession")


def _stop_shared_dask_sessions() -> None:
    module = sys.modules.get("tests.dask_suite.session")
    if module is None:
        return
    module.stop_sessions()
    handoff = os.environ.pop(module.HANDOFF_VARIABLE, None)
    if handoff is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(handoff, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Every process the tests start gets the session's own temporary directory (tests/session_tmpdir.py).

    Under .ci/run, stop before the first test unless every `scaler` the tests import is the installed wheel."""
    if not _is_xdist_controller(session.config):  # its workers run the tests, each with a directory of its own
        session_tmpdir.start()
    if not installed_scaler.install_required():
        return
    import scaler

    try:
        installed_scaler.installed_init_file()
        problems = [installed_scaler.import_problem(scaler.__file__ or "", "the test process")]
        environment = child_python_environment()
        child_file = installed_scaler.init_file_of_child_python(environment, cwd=REPO_ROOT)
        problems.append(installed_scaler.import_problem(child_file, "a child python started by the tests"))
        script = console_script("scaler_keygen")
        script_file = installed_scaler.init_file_of_console_script(script, ["-h"], environment, cwd=REPO_ROOT)
        problems.append(installed_scaler.import_problem(script_file, script))
    except (installed_scaler.NotInstalledError, RuntimeError, OSError, subprocess.SubprocessError) as error:
        problems = [str(error)]
    found = [problem for problem in problems if problem is not None]
    if found:
        pytest.exit(
            f"{installed_scaler.REQUIRE_INSTALL_VARIABLE} is set but the tests would not test the installed "
            "scaler:\n  " + "\n  ".join(found),
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


def console_script(name: str) -> str:
    """The installed console script `name` (e.g. "scaler_ui") in the interpreter's bin directory.

    Tests start it by this path, as a user does, so its entry point runs, not `python -m`.
    """
    path = os.path.join(os.path.dirname(sys.executable), name)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{name} is not installed next to {sys.executable} (pip install -e '.[dev]')")
    return path


# Processes that run across test modules on purpose (the dask suite's background session): they and
# their descendants are not any module's leftovers. Whoever adds one stops it.
BACKGROUND_PIDS: set[int] = set()


def _in_background(process: psutil.Process) -> bool:
    try:
        return process.pid in BACKGROUND_PIDS or any(parent.pid in BACKGROUND_PIDS for parent in process.parents())
    except psutil.Error:
        return False


def _describe(process: psutil.Process) -> object:
    try:
        return (process.pid, process.cmdline())
    except psutil.Error:
        return process.pid


@pytest.fixture(autouse=True, scope="module")
def no_leftover_processes() -> Iterator[None]:
    """Every test module must reap what it started; a survivor fails the module's last test and is killed."""
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    yield
    leftovers = []
    for child in psutil.Process().children(recursive=True):
        if child.pid in before or _in_background(child):
            continue
        try:
            child.wait(timeout=5)
        except psutil.TimeoutExpired:
            leftovers.append(child)
        except psutil.NoSuchProcess:
            pass
    for child in leftovers:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    assert not leftovers, f"processes left behind: {[_describe(child) for child in leftovers]}"


@pytest.fixture(autouse=True, scope="module")
def no_leftover_temporary_entries() -> Iterator[None]:
    """What a module's processes leave in the session's temporary directory for nobody to remove fails its last test."""
    before = set(session_tmpdir.leftovers())
    yield
    left = [entry for entry in session_tmpdir.leftovers() if entry not in before]
    assert not left, f"temporary entries left behind, which nobody removes: {left}"


# What a task sets in its process so that a Client made inside it knows it is nested (scaler/utility/blocking.py).
# A test that runs a task's callable in the pytest process leaves them set, and every later Client of that process
# then submits nested tasks (under xdist, whichever test files follow on the same worker): fail the leaking test.
_TASK_ENVIRONMENT = ("SCALER_NESTING_DEPTH", "SCALER_TASK_PRIORITY")


@pytest.fixture(autouse=True)
def no_task_environment_left_set() -> Iterator[None]:
    """Also what scaler.utility.blocking read of them (it reads them once per process)."""
    from scaler.utility import blocking

    before = {name: os.environ.get(name) for name in _TASK_ENVIRONMENT}
    read_before = (blocking.client_nesting_depth(), blocking.running_task_priority())
    yield
    after = {name: os.environ.get(name) for name in _TASK_ENVIRONMENT}
    read_after = (blocking.client_nesting_depth(), blocking.running_task_priority())
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    blocking._nesting_depth, blocking._task_priority = read_before
    assert after == before, f"the test left a task's environment set in this process: {before} -> {after}"
    assert read_after == read_before, (
        f"the test left a task's nesting depth and priority set in this process: {read_before} -> {read_after}"
    )


def child_python_environment() -> dict[str, str]:
    """Environment for child Pythons: they can import `tests`, and this checkout's `scaler` if it has one.

    Under .ci/run REPO_ROOT is a copy of the repository without `scaler/`, so children import the install.
    """
    environment = dict(os.environ)
    environment["PYTHONPATH"] = REPO_ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    return environment


@pytest.fixture
def python_env() -> dict[str, str]:
    return child_python_environment()


PYTHON = sys.executable


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Workers cannot import test modules, so functions defined in them travel by value, like `__main__`'s."""
    module = getattr(item, "module", None)
    if module is not None and module.__name__ not in _BY_VALUE:
        cloudpickle.register_pickle_by_value(module)
        _BY_VALUE.add(module.__name__)


_BY_VALUE: set[str] = set()
