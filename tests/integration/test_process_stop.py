"""stop_process and stop_processes on real child processes: a clean stop, a stubborn one, and grandchildren."""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil

from scaler.utility.process_stop import stop_process, stop_process_trees, stop_processes

# Prints its child's pid once both run, then ignores SIGTERM if told to, and sleeps.
_PARENT_WITH_CHILD = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(child.pid, flush=True)
time.sleep(600)
"""


def start_parent(kind: str) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, "-c", _PARENT_WITH_CHILD, kind], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    child_pid = int(process.stdout.readline())
    process.stdout.close()
    return process, child_pid


def child_is_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_process_that_obeys_sigterm_stops_with_it_and_its_child_goes_too() -> None:
    process, child_pid = start_parent("obedient")
    stop_process(process, grace_seconds=30)
    assert process.returncode == -signal.SIGTERM
    assert child_is_gone(child_pid)


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_and_its_child_goes_too() -> None:
    process, child_pid = start_parent("stubborn")
    stop_process(process, grace_seconds=0.5)
    assert process.returncode == -signal.SIGKILL
    assert child_is_gone(child_pid)


def test_stop_processes_names_the_ones_it_had_to_kill() -> None:
    obedient, obedient_child = start_parent("obedient")
    stubborn, stubborn_child = start_parent("stubborn")
    try:
        assert stop_processes([obedient, stubborn], grace_seconds=1.0) == [stubborn]
        assert (obedient.returncode, stubborn.returncode) == (-signal.SIGTERM, -signal.SIGKILL)
    finally:  # stop_processes leaves their children alone: this test stops them
        for pid in (obedient_child, stubborn_child):
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass


def test_stopping_a_process_that_already_exited_only_reaps_it() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=60)
    stop_process(process, grace_seconds=1.0)
    assert process.returncode == 0


# Ignores SIGTERM, but says on it whether the process named by its argument still runs; has a child of its own.
_STUBBORN_WATCHING = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
watched = int(sys.argv[1])

def on_term(signum, frame):
    try:
        os.kill(watched, 0)
        print("TERM while the first still runs", flush=True)
    except ProcessLookupError:
        print("TERM after the first was gone", flush=True)

signal.signal(signal.SIGTERM, on_term)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_stop_process_trees_gives_one_grace_to_all_not_one_after_another() -> None:
    """What a worker agent with several busy processors does at its stop: one after another, stubborn ones took a
    grace each, and the agent's cluster killed it first."""
    first, first_child = start_parent("stubborn")
    others = [
        subprocess.Popen([sys.executable, "-c", _STUBBORN_WATCHING, str(first.pid)], stdout=subprocess.PIPE,
                         text=True)
        for _ in range(2)
    ]
    children = [first_child]
    for process in others:
        assert process.stdout is not None
        children.append(int(process.stdout.readline()))
    stop_process_trees([first, *others], grace_seconds=1.0)
    assert [process.returncode for process in (first, *others)] == [-signal.SIGKILL] * 3
    for process in others:
        assert process.stdout is not None
        assert process.stdout.read().strip() == "TERM while the first still runs"
        process.stdout.close()
    assert all(child_is_gone(pid) for pid in children)
