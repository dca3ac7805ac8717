"""A multiprocessing child SIGTERMed while its main thread waits in C code still ends, its closers run
(scaler/utility/child_exit.py).

Python runs a signal's handler on the main thread only, between two bytecodes. A pool worker's main thread
waits for its queue's lock in glibc's sem_wait, and a pool's terminate() takes that lock for good and then sends
SIGTERM. When the signal lands while that wait is not inside its system call (woken by the lock's release just
before, and going back to sleep in glibc's own retry loop), its C-level handler runs and nothing interrupts the
wait again: the Python handler never runs and the worker never ends (1 round in about 50 of a terminated pool
under load, `pool.join()` then hangs). Here the C-level handler is made to run on another thread of the child,
which leaves its main thread in the same state, every time.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import threading
import time
from typing import Any

import pytest

from scaler.utility.child_exit import close_when_child_ends
from tests.integration.forked_child import FORK, start_forked_child

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs POSIX threads' signals")

WAIT_SECONDS = 30.0  # an upper bound against hangs on a loaded machine, never an expectation


def _state(thread_id: int) -> str:
    with open(f"/proc/self/task/{thread_id}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _sleeping_for_good(thread_id: int, deadline: float) -> None:
    """Until the thread has been seen asleep twice, with this thread asleep in between: had it waited for the GIL
    at the first look, it had it meanwhile and went on into its wait."""
    seen = 0
    while seen < 2 and time.monotonic() < deadline:
        seen = seen + 1 if _state(thread_id) == "S" else 0
        time.sleep(0.05)


def _blocked_child(lock: Any, report: multiprocessing.connection.Connection) -> None:
    close_when_child_ends(lambda: report.send("closed"))  # as a Client made here does
    main_thread = threading.main_thread().native_id
    assert main_thread is not None
    about_to_wait = threading.Event()

    def signal_on_another_thread() -> None:
        about_to_wait.wait(WAIT_SECONDS)
        _sleeping_for_good(main_thread, time.monotonic() + WAIT_SECONDS)
        report.send("signalled")
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # the C-level handler runs here, not on main

    threading.Thread(target=signal_on_another_thread, daemon=True).start()
    about_to_wait.set()
    lock.acquire()  # held by the parent for good, as a terminating pool holds its workers' queue lock


def test_a_sigterm_whose_handler_the_blocked_main_thread_cannot_run_still_ends_the_child() -> None:
    lock = FORK.Lock()
    lock.acquire()
    child, receiver = start_forked_child(_blocked_child, lock)
    try:
        assert receiver.poll(WAIT_SECONDS) and receiver.recv() == "signalled"
        child.join(WAIT_SECONDS)
        assert child.exitcode == -signal.SIGTERM, "still running" if child.exitcode is None else child.exitcode
        assert receiver.poll(WAIT_SECONDS) and receiver.recv() == "closed"
    finally:
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
            child.join(WAIT_SECONDS)
        receiver.close()
        lock.release()



def _wakeup_fd() -> int:
    current = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(current)
    return current


def _wakeup_fds_seen(own_first: bool, report: multiprocessing.connection.Connection) -> None:
    """In a child: the wakeup fd after a registration (its own, if it had one), and in a process forked then."""
    own, other = socket.socketpair()
    own.setblocking(False)
    if own_first:
        signal.set_wakeup_fd(own.fileno())
    close_when_child_ends(lambda: None)
    after = _wakeup_fd()
    grandchild = os.fork()
    if grandchild == 0:
        os._exit(0 if _wakeup_fd() == (own.fileno() if own_first else -1) else 1)
    _, status = os.waitpid(grandchild, 0)
    report.send((after == own.fileno() if own_first else after not in (-1, own.fileno()),
                 os.waitstatus_to_exitcode(status)))


@pytest.mark.parametrize("own_first", [True, False], ids=["its own", "none"])
def test_a_childs_own_wakeup_fd_stays_and_ours_does_not_outlive_a_fork(own_first: bool) -> None:
    child, receiver = start_forked_child(_wakeup_fds_seen, own_first)
    try:
        assert receiver.poll(WAIT_SECONDS) and receiver.recv() == (True, 0)
        child.join(WAIT_SECONDS)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
            child.join(WAIT_SECONDS)
        receiver.close()
