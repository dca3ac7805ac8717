"""Exit with the parent: the processes a SchedulerClusterCombo or a Cluster starts must not outlive it.

The parent names itself in the environment of its children; a child's loop compares that pid with its
current parent's now and then, and exits once they differ (the orphan was handed to another process).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Callable, Mapping

EXIT_WITH_PARENT_ENV = "SCALER_EXIT_WITH_PARENT"


def exit_with_parent_pid() -> int | None:
    """The pid this process must not outlive, when its parent asked for that; else None."""
    value = os.environ.get(EXIT_WITH_PARENT_ENV)
    return int(value) if value else None


def environment_exiting_with_this_process(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment for a child that must exit when this process is gone (`base` defaults to ours)."""
    return dict(os.environ if base is None else base, **{EXIT_WITH_PARENT_ENV: str(os.getpid())})


def parent_is_gone(parent_pid: int | None) -> bool:
    """True once the process named `parent_pid` is no longer our parent; always False for None."""
    return parent_pid is not None and os.getppid() != parent_pid


def die_with_parent() -> None:
    """Linux: have the kernel kill this process when its parent dies, even while a long task runs (a
    loop's parent check covers other platforms, and a failure here)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except Exception:
        pass


def signal_when_parent_dies(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A `preexec_fn` for Popen (Linux): the child gets `signum` when the process that started it dies, even
    by SIGKILL, so that a child which does not look at SCALER_EXIT_WITH_PARENT stops too (a no-op elsewhere).
    libc is loaded here, in the parent: between fork and exec the child only calls it."""
    if not sys.platform.startswith("linux"):
        return lambda: None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def arm() -> None:
        libc.prctl(1, signum)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), signum)

    return arm
