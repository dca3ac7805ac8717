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

Python runs a signal's handler on the main thread only, between two bytecodes; the C-level handler, on whatever
thread the kernel chose, only marks it due. A main thread waiting in C code that does not give up on a signal
never runs it. A pool worker's main thread waits for its queue's lock in glibc's sem_wait, and `terminate()`
takes that lock for good before its SIGTERM: when the signal lands while that wait is between two sleeps (woken
by the lock's release, going back to sleep in glibc's own loop), nothing interrupts it again, and the worker
never ends (`pool.join()` hangs). So a thread of ours also sees each SIGTERM, through the wakeup fd that the
C-level handler writes (`signal.set_wakeup_fd`), and sends it again to the main thread itself until the handler
has begun: the main thread's wait then ends with EINTR, and Python runs the handler. A process that has a wakeup
fd already (asyncio's signal handling sets one) keeps it, without this.

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
# Set as the SIGTERM handler begins: until then, a SIGTERM seen through the wakeup fd is sent again to the main
# thread, this often.
_sigterm_began = threading.Event()
_NUDGE_SECONDS = 0.25
# The pipe whose write end is the wakeup fd (read end, write end), in the process that set it.
_wakeup_pipe: tuple[int, int] | None = None


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
    _watch_sigterm()  # first: a SIGTERM that comes once the handler is set is seen
    signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_pid = os.getpid()


def _watch_sigterm() -> None:
    """On the main thread: make the wakeup fd a pipe that a thread of ours reads (see the module's docstring)."""
    global _wakeup_pipe
    if not hasattr(signal, "pthread_kill"):
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the C-level handler must never wait
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if previous != -1:  # the process's (asyncio's): it stays
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)
        return
    _wakeup_pipe = (read_end, write_end)
    threading.Thread(target=_nudge_main_thread, args=(read_end,), name="scaler-child-sigterm", daemon=True).start()


def _nudge_main_thread(read_end: int) -> None:
    """Wait for a SIGTERM that our handler is to take; then send it to the main thread until the handler began."""
    while True:
        try:
            received = os.read(read_end, 512)
        except OSError:
            return
        if not received:
            return  # the pipe was closed
        if signal.SIGTERM.value in received and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            break
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    while not _sigterm_began.wait(_NUDGE_SECONDS) and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        try:
            signal.pthread_kill(main_thread, signal.SIGTERM)
        except OSError:
            return  # the main thread is gone: the process is ending


def _on_sigterm(signum: int, _frame: object) -> None:
    global _sigterm_deferred
    _sigterm_began.set()
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
    global _lock, _began, _done, _main_closing, _sigterm_deferred, _sigterm_began, _wakeup_pipe
    _lock = threading.RLock()
    _closers.clear()
    _began, _done = False, threading.Event()
    _main_closing = _sigterm_deferred = False
    _sigterm_began = threading.Event()
    if _wakeup_pipe is not None:  # the parent's, which no thread reads here: the child sets its own if it needs one
        read_end, write_end = _wakeup_pipe
        _wakeup_pipe = None
        try:
            current = signal.set_wakeup_fd(-1)
        except ValueError:  # not the main thread (Python makes the forking thread the child's): the pipe stays
            return
        if current != write_end:
            signal.set_wakeup_fd(current)
        os.close(read_end)
        os.close(write_end)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
