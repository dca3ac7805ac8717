"""On a machine without the native worker's build packages (the README's commands install none), the tests
that need it skip and name the Debian packages; under SCALER_TESTS_FORBID_SKIPS (.ci/run) the session fails.

The machine is simulated: pkg-config is pointed at an empty directory, so it finds none of the libraries.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

INNER_TEST = '''
from tests.native_worker import native_worker_executable


def test_needs_the_native_worker():
    native_worker_executable()
'''


def run_inner_session(tmp_path: pathlib.Path, environment: dict[str, str]) -> subprocess.CompletedProcess:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    empty = tmp_path / "no-pkg-config-files"
    empty.mkdir(exist_ok=True)
    environment = dict(environment, PKG_CONFIG_LIBDIR=str(empty), PKG_CONFIG_PATH="")
    environment.pop("SCALER_NATIVE_WORKER", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
         "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", "-rs", str(tmp_path / "test_inner.py")],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120, check=False,
    )


def test_missing_packages_skip_and_name_them(tmp_path: pathlib.Path, python_env: dict[str, str]) -> None:
    environment = dict(python_env)
    environment.pop("SCALER_TESTS_FORBID_SKIPS", None)
    completed = run_inner_session(tmp_path, environment)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "1 skipped" in completed.stdout, completed.stdout
    assert "libmsgpack-dev" in completed.stdout and "apt-get install -y cmake g++" in completed.stdout, completed.stdout


def test_missing_packages_fail_the_session_where_skips_are_forbidden(
    tmp_path: pathlib.Path, python_env: dict[str, str]
) -> None:
    completed = run_inner_session(tmp_path, dict(python_env, SCALER_TESTS_FORBID_SKIPS="1"))
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert "tests skipped (they did not run)" in completed.stderr, completed.stderr
