"""Closing what a multiprocessing child owns when it ends: its end skips atexit.

A Client's fallback for whoever forgets to disconnect is a weakref.finalize, run at interpreter exit through
atexit. A multiprocessing child never gets there: it runs multiprocessing's own exit hooks and then
`os._exit`, and a pool's `terminate()` (which joblib's "multiprocessing" backend and `with Pool()` call) ends
the workers still alive with SIGTERM, whose default action runs nothing at all. A client the child left open
(the adapters keep theirs for the next call) is then known to the scheduler until its client timeout.

So in a multiprocessing child, whatever its start method, the closers registered here also run:
- from multiprocessing's exit hook (`multiprocessing.util.Finalize` with an exit priority), when the child
  ends by itself: a Process whose target returned, a pool worker after `close()`;
- on SIGTERM, if it still has its default action and the registration is made on the main thread (the only
  one that may set a handler): the handler runs them and then ends the process by SIGTERM as before, so the
  exit status is what the pool expects. They run on a thread of their own, waited for a bounded time: the
  signal may have interrupted the main thread holding a lock they need.

A process that is not a multiprocessing child is left alone: its atexit runs, and its signals are its owner's.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import os
import signal
import threading
from typing import Callable, TypeVar

# How long a SIGTERMed child waits for its clients to say goodbye before it ends anyway.
SIGTERM_CLOSE_SECONDS = 5.0
# Before multiprocessing joins the child's own children (priority 0 and above run first).
_EXIT_PRIORITY = 10

# Reentrant: the SIGTERM handler runs on the main thread, which it may have interrupted holding this lock.
_lock = threading.RLock()
_Closer = TypeVar("_Closer", bound=Callable[[], object])
_closers: list[Callable[[], object]] = []
# Set once the child ends: the closers then run on a thread of their own, and whoever comes later waits for that
# thread's end rather than for nothing.
_began = False
_done = threading.Event()
# The SIGTERM handler runs on the main thread, and may interrupt the main thread's own close_all (multiprocessing
# runs its exit hooks there, and a pool's terminate() often sends SIGTERM just as its workers end by themselves):
# then it only asks that close_all to end the process by SIGTERM once it is done, since it could not wait for it.
_main_closing = False
_sigterm_deferred = False
_exit_hook_pid = 0
_sigterm_pid = 0


def close_when_child_ends(closer: _Closer) -> _Closer:
    """In a multiprocessing child, call `closer()` when the child ends or is SIGTERMed. `closer` must be safe to
    call twice and from any thread (a weakref.finalize is); elsewhere, nothing. Returns `closer`."""
    if multiprocessing.parent_process() is None:
        return closer
    global _exit_hook_pid
    with _lock:
        _closers[:] = [kept for kept in _closers if getattr(kept, "alive", True)]
        _closers.append(closer)
        if _exit_hook_pid != os.getpid():
            _exit_hook_pid = os.getpid()
            multiprocessing.util.Finalize(None, close_all, exitpriority=_EXIT_PRIORITY)
    _close_on_sigterm()
    return closer


def close_all(timeout: float = SIGTERM_CLOSE_SECONDS) -> None:
    """Run the registered closers on a thread (once: later calls wait for the first's), waiting at most `timeout`."""
    global _began, _main_closing
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        _main_closing = True
    with _lock:
        first, _began = not _began, True
        closers = list(_closers)
        _closers.clear()
    if first:
        threading.Thread(target=_run, args=(closers,), name="scaler-child-exit", daemon=True).start()
    _done.wait(timeout)
    if on_main:
        # In this order: a SIGTERM handled after the first line closes (and finds the closing done) by itself.
        _main_closing = False
        if _sigterm_deferred:
            _end_by(signal.SIGTERM)


def _run(closers: list[Callable[[], object]]) -> None:
    try:
        for closer in closers:
            try:
                closer()
            except Exception:  # noqa: BLE001 - one closer's failure must not keep the others from running
                pass
    finally:
        _done.set()


def _close_on_sigterm() -> None:
    global _sigterm_pid
    if _sigterm_pid == os.getpid() or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, _on_sigterm):  # ours: inherited from a parent
        return  # the process's owner decided what SIGTERM does
    signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_pid = os.getpid()


def _on_sigterm(signum: int, _frame: object) -> None:
    global _sigterm_deferred
    if _main_closing:
        _sigterm_deferred = True
        return
    close_all()
    _end_by(signum)


def _end_by(signum: int) -> None:
    """End the process as the signal's default action does, so that its parent sees the status it expects."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _after_fork_in_child() -> None:
    """The parent's closers are the parent's; a child registers its own (and its own hooks)."""
    global _lock, _began, _done, _main_closing, _sigterm_deferred
    _lock = threading.RLock()
    _closers.clear()
    _began, _done = False, threading.Event()
    _main_closing = _sigterm_deferred = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
