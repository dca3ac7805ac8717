"""Where a task says "I am about to wait for other tasks", so its worker can keep serving meanwhile.

A worker's processor installs hooks here. The client calls `waiting_for_tasks()` around every wait on
task results; outside a worker there are no hooks and it costs one check.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable, Iterator

# Set by a processor while it runs a task: the nesting depth a Client created inside that task has.
NESTING_DEPTH_ENVIRONMENT_VARIABLE = "SCALER_NESTING_DEPTH"
# Set by a processor while it runs a task of a priority other than 0: the priority a task submitted from inside
# that task has unless given one (so nested work is ordered as the work that waits for it).
TASK_PRIORITY_ENVIRONMENT_VARIABLE = "SCALER_TASK_PRIORITY"

_enter: Callable[[], None] | None = None
_exit: Callable[[], None] | None = None
_depth = threading.local()


def install_hooks(enter: Callable[[], None], exit: Callable[[], None]) -> None:
    global _enter, _exit
    _enter, _exit = enter, exit


def _int_from_environment(name: str) -> int:
    try:
        return int(os.environ.get(name, "0"))
    except ValueError:
        return 0


# Read per submit, as the priority below: an environment lookup cost 1-4 us, a tenth of a submit's own work. A
# process a task started inherits the variable and reads it here once; a forked one inherits this value.
_nesting_depth = _int_from_environment(NESTING_DEPTH_ENVIRONMENT_VARIABLE)


def set_task_depth(depth: int) -> None:
    """Called by the processor before it loads a task's arguments (a Client among them connects then), and by a
    Symphony task's call (scaler/adapters/symphony/task_call.py) when this module is loaded."""
    global _nesting_depth
    _nesting_depth = depth + 1
    os.environ[NESTING_DEPTH_ENVIRONMENT_VARIABLE] = str(depth + 1)


# Read per submit: a module global costs a tenth of an environment lookup. A process that a task started
# inherits the variable and reads it here once.
_task_priority = _int_from_environment(TASK_PRIORITY_ENVIRONMENT_VARIABLE)


def set_task_priority(priority: int) -> None:
    """Called by the processor before it loads a task's arguments, as set_task_depth."""
    global _task_priority
    _task_priority = priority
    if priority:
        os.environ[TASK_PRIORITY_ENVIRONMENT_VARIABLE] = str(priority)
    else:
        os.environ.pop(TASK_PRIORITY_ENVIRONMENT_VARIABLE, None)


def running_task_priority() -> int:
    """The priority of the task running in this process; 0 in an application."""
    return _task_priority


def client_nesting_depth() -> int:
    """0 in an application; d + 1 for a client created inside a task of depth d."""
    return _nesting_depth


@contextlib.contextmanager
def waiting_for_tasks() -> Iterator[None]:
    """Tell the worker (if any) that this thread waits on nested tasks; only the outermost wait counts."""
    enter, exit = _enter, _exit
    depth = getattr(_depth, "value", 0)
    # Only the thread running the task talks to the agent; waits on other threads just wait.
    if enter is None or exit is None or depth > 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    enter()
    _depth.value = 1
    try:
        yield
    finally:
        _depth.value = 0
        exit()
