"""The native worker's pure rules, tested in C++ by native/worker/tests/*_test.cpp: the executable the build makes
next to the native worker. Its rejoin (src/scheduler_session.cpp, PROTOCOL.md §21), which of several
scheduler addresses it talks to (src/address_rotation.cpp, §23), how often it heartbeats (src/heartbeat_pace.cpp,
§5 and "Heartbeats spaced out at scale"), and when its results go (src/worker_core.cpp)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.native_worker import BUILD_TIMEOUT_SECONDS, NATIVE_WORKER_ENV, native_worker_executable

SESSION_TEST = "scaler_native_session_test"


@pytest.mark.timeout(60 + BUILD_TIMEOUT_SECONDS)
def test_the_native_scheduler_session_rules() -> None:
    executable = os.path.join(os.path.dirname(native_worker_executable()), SESSION_TEST)
    if not os.access(executable, os.X_OK):
        pytest.fail(f"{SESSION_TEST} is not next to the native worker ({NATIVE_WORKER_ENV} names a build older than "
                    "it: build again with native/build.py)", pytrace=False)
    ran = subprocess.run([executable], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
