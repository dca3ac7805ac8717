"""The callable a Symphony service runs for one Scaler task: the function, its keywords and nesting depth.

The service container of document 004 runs `fn, *args = cloudpickle.loads(payload)` then `fn(*args)`, so
what travels as `fn` is this object. It is pickled by value (this module imports nothing from scaler),
so a service host needs cloudpickle but not scaler, unless the task itself uses scaler (a nested Client).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

# Read by a scaler Client made inside the task: its tasks are nested one level deeper than this one.
_NESTING_DEPTH_VARIABLE = "SCALER_NESTING_DEPTH"


class TaskCall:
    def __init__(self, function: Callable[..., Any], keywords: dict[str, Any], nesting_depth: int) -> None:
        self.function = function
        self.keywords = keywords
        self.nesting_depth = nesting_depth

    def __call__(self, *args: Any) -> Any:
        # Tasks this one submits carry priority over the base concurrency, as nested tasks do.
        os.environ[_NESTING_DEPTH_VARIABLE] = str(self.nesting_depth + 1)
        # A scaler already loaded in this service host read the variable once (blocking.py): tell it too.
        blocking = sys.modules.get("scaler.utility.blocking")
        if blocking is not None:
            blocking.set_task_depth(self.nesting_depth)
        return self.function(*args, **self.keywords)
