"""What a task calls from inside: `get_client`, `secede`, `rejoin`; and `fire_and_forget`.

`secede()` and `rejoin()` are accepted and do nothing, on purpose: on Scaler, a task that waits on other
tasks (`result()`, `gather`, `wait`, `as_completed`, `progress`) already tells its worker so, which then
runs other tasks meanwhile (scaler/utility/blocking.py), and the scheduler dispatches tasks submitted from
inside tasks before those of shallower nesting (its queues are served deepest first), so the work a waiting
task needs goes first. There is no thread pool slot to give back, and nothing to wait for on rejoin.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Iterator

from scaler.client.client import Client as NativeClient
from scaler.compat.cluster_choice import ADDRESS_ENVIRONMENT_VARIABLE
from scaler.compat.dask.distributed.arguments import futures_in
from scaler.compat.dask.distributed.client import RUNNING, Client
from scaler.compat.dask.distributed.default import default_client
from scaler.utility.blocking import client_nesting_depth

_lock = threading.Lock()
_task_clients: dict[str, Client] = {}


def get_client(address: str | None = None, timeout: Any = None, resolve_address: bool = True) -> Client:
    """Inside a task: a client of the scheduler that task came from. Elsewhere: the client of `address`, else
    the default client (the newest open one); ValueError if there is none."""
    if address is None and client_nesting_depth() > 0:
        return _client_in_task()
    if address is not None:
        client = _task_clients.get(address)
        if client is not None and client.status == RUNNING:
            return client
        try:
            current = default_client()
        except ValueError:
            current = None
        if current is not None and current.scheduler_address == address:
            return current
        with _lock:
            client = _task_clients[address] = Client(address, set_as_default=False)
        return client
    return default_client()


def _client_in_task() -> Client:
    address = os.environ.get(ADDRESS_ENVIRONMENT_VARIABLE, "")
    with _lock:
        client = _task_clients.get(address)
        if client is not None and client.status == RUNNING and client.native.is_connected:
            return client
        if address:
            client = Client(address, set_as_default=False)
        else:
            try:
                native = NativeClient()  # type: ignore[call-arg]
            except TypeError:
                raise ValueError(
                    "get_client() inside a task: this Scaler's workers do not tell a task its scheduler; "
                    f"set {ADDRESS_ENVIRONMENT_VARIABLE} for the workers, or pass the Client to the task"
                ) from None
            client = Client(native, set_as_default=False)
        _task_clients[address] = client
        return client


def secede() -> None:
    """A no-op on Scaler: see the module docstring."""


def rejoin() -> None:
    """A no-op on Scaler: see the module docstring."""


def fire_and_forget(obj: Any) -> None:
    """Let the tasks of these futures run to their end even once no Future of them is left."""
    for future in futures_in(obj):
        future.client._keys.forget_until_done(future._state)


@contextlib.contextmanager
def worker_client(timeout: Any = None, separate_thread: bool = True) -> Iterator[Client]:
    """`with worker_client() as client:` inside a task: get_client(); seceding is a no-op (see above)."""
    yield get_client()
