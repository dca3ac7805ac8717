"""Which scheduler a Client() given no address connects to.

1. Inside a task: the scheduler the task came from. A worker starts its processors with that address in
   SCALER_TASK_SCHEDULER_ADDRESS, so a client made by the task (or by a process the task started) finds it.
2. Else the address in SCALER_ADDRESS, as the adapters (dask, joblib, the executor) read it too.
3. Else there is none to guess: ValueError at the call, saying how to give one.
"""

from __future__ import annotations

import os

ADDRESS_ENVIRONMENT_VARIABLE = "SCALER_ADDRESS"
TASK_SCHEDULER_ENVIRONMENT_VARIABLE = "SCALER_TASK_SCHEDULER_ADDRESS"


def configured_address() -> str | None:
    """The address a Client() without one uses (see above); None outside tasks without SCALER_ADDRESS."""
    return os.environ.get(TASK_SCHEDULER_ENVIRONMENT_VARIABLE) or os.environ.get(ADDRESS_ENVIRONMENT_VARIABLE) or None


def scheduler_address(address: str | None) -> str:
    if address:
        return address
    found = configured_address()
    if found is None:
        raise ValueError(
            "Client() was given no scheduler address and there is none to use: pass it, as in"
            " Client(address=\"tcp://127.0.0.1:2345\"), or set the SCALER_ADDRESS environment variable to it"
            " (inside a task, Client() connects to the task's own scheduler by itself)"
        )
    return found
