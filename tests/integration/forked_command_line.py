"""A console script's command line run in a child forked from the test, not in a new interpreter.

A command line that must be refused by the parser needs nothing but the entry point the console script
calls (`sys.exit(main())` with `sys.argv` set): starting an interpreter and importing scaler for each one
cost about a second of a loaded machine's CPU, and test_options.py and test_cli.py check dozens. The
child is forked after the entry point was imported, gets its own stdout, stderr (files), stdin (/dev/null),
environment and process group, and ends with the entry point's exit status, as the console script would.
A command line the parser wrongly accepts goes on to start what it starts, as a process would; it is
killed with its process group at the timeout, and the caller reports it.

Each test file that uses this still runs every console script it checks as a real process at least once
(the installed script, as a user runs it), so the scripts' own wiring stays covered.
"""

from __future__ import annotations

import importlib.metadata
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Callable

from tests.conftest import console_script

# The status of a child whose entry point raised something other than SystemExit, as Python's own.
UNCAUGHT_STATUS = 1


def entry_point(script: str) -> Callable[[], object]:
    """The function the installed console script `script` calls (its `console_scripts` entry point)."""
    (found,) = importlib.metadata.entry_points(group="console_scripts", name=script)
    return found.load()


def _exit_status(code: object) -> int:
    """What the interpreter exits with for `sys.exit(code)`; a message goes to stderr, as Python prints it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_forked(
    script: str, args: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """`script *args` as its console script runs it, in a forked child; raises TimeoutExpired (after killing the
    child's process group) if it has not exited within `timeout` seconds."""
    main = entry_point(script)
    argv = [console_script(script), *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the test
            status = UNCAUGHT_STATUS
            try:
                os.setpgid(0, 0)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdin = open(0, closefd=False)
                sys.stdout = open(1, "w", closefd=False)
                sys.stderr = open(2, "w", closefd=False)
                os.environ.clear()
                os.environ.update(env)
                sys.argv = argv
                try:
                    sys.exit(main())
                except SystemExit as exited:
                    status = _exit_status(exited.code)
                except BaseException:
                    traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(status)
        deadline = time.monotonic() + timeout
        while True:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                raise subprocess.TimeoutExpired(argv, timeout, output=_read(out), stderr=_read(err))
            time.sleep(0.005)
        return subprocess.CompletedProcess(argv, os.waitstatus_to_exitcode(wait_status), _read(out), _read(err))


def _read(file: object) -> str:
    file.seek(0)  # type: ignore[attr-defined]
    return file.read().decode("utf-8", errors="replace")  # type: ignore[attr-defined]
