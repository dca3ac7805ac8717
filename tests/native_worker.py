"""Where the tests find the native worker (native/worker/): SCALER_NATIVE_WORKER, or built on demand.

- `SCALER_NATIVE_WORKER=/path/to/scaler_native_worker`: that executable (.ci/run builds it first).
- unset: `native/build.py` builds it into build/native/ of this checkout, once per test session.
- `SCALER_NATIVE_WORKER=skip`: the tests of the native worker are left out, and say so.

On a machine without the compiler or the Debian packages the README's commands do not install (a
newcomer's), those tests skip with the build's own message, which names the packages to install.
.ci/run installs them and sets SCALER_TESTS_FORBID_SKIPS, under which any skip fails the session
(tests/conftest.py): a CI that lost its packages does not go green quietly. Any other failure of
the build (the compiler's) fails those tests.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest

NATIVE_WORKER_ENV = "SCALER_NATIVE_WORKER"
SKIP_VALUE = "skip"
BUILD_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "native", "build.py")
# native/build.py's exit status when a tool or library it needs is not installed (MISSING_PACKAGES_STATUS).
MISSING_PACKAGES_STATUS = 3
# A first build compiles the generated schema code: a minute on a busy 2-core machine.
BUILD_TIMEOUT_SECONDS = 900


def native_worker_skipped() -> bool:
    return os.environ.get(NATIVE_WORKER_ENV) == SKIP_VALUE


@functools.cache
def _resolve() -> tuple[str, str, bool]:
    """(executable, "", False) or ("", why there is none, whether system packages are missing)."""
    given = os.environ.get(NATIVE_WORKER_ENV)
    if given:
        if not os.access(given, os.X_OK):
            return "", f"{NATIVE_WORKER_ENV}={given} is not an executable file", False
        return given, "", False
    try:
        built = subprocess.run(
            [sys.executable, BUILD_SCRIPT], capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired:
        return "", f"native/build.py did not finish within {BUILD_TIMEOUT_SECONDS} s", False
    if built.returncode != 0:
        problem = built.stderr.strip() or f"native/build.py failed with status {built.returncode}"
        return "", problem, built.returncode == MISSING_PACKAGES_STATUS
    return built.stdout.strip().splitlines()[-1], "", False


def native_worker_executable() -> str:
    """The native worker's path; skips when the user asked to leave it out or the machine lacks the packages
    to build it (naming them), fails loudly when the build itself fails."""
    if native_worker_skipped():
        pytest.skip(f"{NATIVE_WORKER_ENV}={SKIP_VALUE}: the native worker is left out of this run")
    executable, problem, packages_missing = _resolve()
    if packages_missing:
        pytest.skip(problem.removeprefix("native/build.py: "))  # "cannot build the native worker: ... not found"
    if not executable:
        pytest.fail(
            f"the native worker is needed and could not be built: {problem}\n(set {NATIVE_WORKER_ENV} to a built "
            f"executable, or {NATIVE_WORKER_ENV}={SKIP_VALUE} to leave it out)",
            pytrace=False,
        )
    return executable
