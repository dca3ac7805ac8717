"""Which cluster the adapters use, decided the same way for dask, joblib and the executor:

1. the client (or address) given to `use(...)`, innermost first;
2. else, inside a task, the scheduler the task came from (as for a bare `Client()`);
3. else the address in the `SCALER_ADDRESS` environment variable;
4. else an embedded local cluster (a scheduler and one worker per core), started on first use and
   shut down at interpreter exit.

In a forked child (multiprocessing's "fork" start method, a web server's forked workers), the
parent's clients cannot be used (see scaler/utility/fork_safety.py), so the adapters connect anew to
the same scheduler: for an address or the embedded cluster as the parent did, and for a Client given
to `use(...)` with that client's settings (its serializer, timeouts, keys), as a client passed into a
task reconnects on its worker. The user's Client object itself still fails at once in the child. A
client the adapters made themselves is made anew, too, when it lost its scheduler.

An adapter asked to show what tasks print (`stream_output=True`) whose chosen client does not is given a client
with the same settings that does, made once per chosen client (`current_client(stream_output=True)`).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import threading
from typing import Union

from scaler.client.client import Client
from scaler.cluster.combo import SchedulerClusterCombo
from scaler.utility.scheduler_address import ADDRESS_ENVIRONMENT_VARIABLE as ADDRESS_ENVIRONMENT_VARIABLE
from scaler.utility.scheduler_address import configured_address

_lock = threading.RLock()
_used: list[use] = []
_by_address: dict[str, Client] = {}
# Per chosen client (by id, checked with `is`): the client with its settings that streams what tasks print.
_streaming: dict[int, tuple[Client, Client]] = {}
_embedded: SchedulerClusterCombo | None = None
# The process that started `_embedded`: a forked child uses that cluster but never stops it.
_embedded_owner_pid = 0


class use:  # noqa: N801 - reads as a verb at the call site: `with use(client):`
    """Make the adapters use this client or address; works as a plain call or as a context manager.

    As a plain call the choice stays until `use.reset()`; in a `with` block it ends with the block.
    """

    def __init__(self, client_or_address: Union[Client, str]) -> None:
        if isinstance(client_or_address, Client):
            self._client, self._owned = client_or_address, False
        elif isinstance(client_or_address, str):
            self._client, self._owned = Client(address=client_or_address), True
        else:
            raise TypeError("use() takes a scaler.Client or a scheduler address such as tcp://127.0.0.1:2345")
        # The user's client, in a process forked from the one it was given in, is replaced by this one.
        self._given_in_pid = os.getpid()
        self._forked_client: Client | None = None
        with _lock:
            _used.append(self)

    def __enter__(self) -> Client:
        return self._client

    def __exit__(self, *exc_info: object) -> None:
        with _lock:
            if self in _used:
                _used.remove(self)
        if self._owned:
            self._client.disconnect()

    def client(self) -> Client:
        """The chosen client, connected from this process: a forked child connects anew to the same scheduler."""
        if self._owned:
            if not self._client.is_connected:
                self._client = Client(address=self._client.address)
            return self._client
        if os.getpid() == self._given_in_pid:
            return self._client
        if self._forked_client is None or not self._forked_client.is_connected:
            self._forked_client = _connected_anew(self._client)
        return self._forked_client

    @staticmethod
    def reset() -> None:
        """Forget every client chosen with `use(...)` outside a `with` block."""
        with _lock:
            _used.clear()


def _connected_anew(client: Client) -> Client:
    """A client of this process with `client`'s settings: what unpickling `client` gives, as in a task."""
    rebuild, arguments = client.__reduce__()
    return rebuild(*arguments)


def cluster_is_chosen() -> bool:
    """Whether `use(...)`, the running task or SCALER_ADDRESS names a cluster: if not, current_client() starts the
    embedded one."""
    return bool(_used) or configured_address() is not None


def current_client(stream_output: bool = False) -> Client:
    """The client the adapters should submit to now (see the module docstring for the order); with
    `stream_output`, one that shows what its tasks print."""
    with _lock:
        if _used:
            chosen = _used[-1].client()
        else:
            address = configured_address()
            chosen = _client_for(address if address is not None else _embedded_cluster().get_address())
        return _streaming_twin(chosen) if stream_output else chosen


def _streaming_twin(client: Client) -> Client:
    if client.stream_output:
        return client
    kept = _streaming.get(id(client))
    if kept is not None and kept[0] is client and kept[1].is_connected:
        return kept[1]
    if kept is not None:
        kept[1].disconnect()  # its chosen client is gone or replaced, or it lost its scheduler
    _, (settings,) = client.__reduce__()
    options = {field.name: getattr(settings, field.name) for field in dataclasses.fields(settings)}
    twin = Client(**{**options, "stream_output": True})
    _streaming[id(client)] = (client, twin)
    return twin


def _client_for(address: str) -> Client:
    client = _by_address.get(address)
    if client is None or not client.is_connected:
        client = _by_address[address] = Client(address=address)
    return client


def _embedded_cluster() -> SchedulerClusterCombo:
    global _embedded, _embedded_owner_pid
    if _embedded is None:
        _embedded = SchedulerClusterCombo(n_workers=os.cpu_count() or 1, logging_level="WARNING")
        _embedded_owner_pid = os.getpid()
        atexit.register(_shutdown_embedded)
    return _embedded


def _shutdown_embedded() -> None:
    """Disconnect our clients before the cluster goes, so nothing waits on a vanished scheduler."""
    global _embedded
    with _lock:
        clients = [*_by_address.values(), *(twin for _, twin in _streaming.values())]
        _by_address.clear()
        _streaming.clear()
        cluster, _embedded = _embedded, None
    for client in clients:
        client.disconnect()
    if cluster is not None and _embedded_owner_pid == os.getpid():
        cluster.shutdown()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # it may have been held by a thread that stayed with the parent


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
