"""Which cluster the adapters use, decided the same way for dask, joblib and the executor:

1. the client (or address) given to `use(...)`, innermost first;
2. else the address in the `SCALER_ADDRESS` environment variable;
3. else an embedded local cluster (a scheduler and one worker per core), started on first use and
   shut down at interpreter exit.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Union

from scaler.client.client import Client
from scaler.cluster.combo import SchedulerClusterCombo

ADDRESS_ENVIRONMENT_VARIABLE = "SCALER_ADDRESS"

_lock = threading.RLock()
_used: list[Client] = []
_by_address: dict[str, Client] = {}
_embedded: SchedulerClusterCombo | None = None


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
        with _lock:
            _used.append(self._client)

    def __enter__(self) -> Client:
        return self._client

    def __exit__(self, *exc_info: object) -> None:
        with _lock:
            if self._client in _used:
                _used.remove(self._client)
        if self._owned:
            self._client.disconnect()

    @staticmethod
    def reset() -> None:
        """Forget every client chosen with `use(...)` outside a `with` block."""
        with _lock:
            _used.clear()


def current_client() -> Client:
    """The client the adapters should submit to now (see the module docstring for the order)."""
    with _lock:
        if _used:
            return _used[-1]
        address = os.environ.get(ADDRESS_ENVIRONMENT_VARIABLE)
        if address:
            return _client_for(address)
        return _client_for(_embedded_cluster().get_address())


def _client_for(address: str) -> Client:
    client = _by_address.get(address)
    if client is None or not client._connection.is_open:
        client = _by_address[address] = Client(address=address)
    return client


def _embedded_cluster() -> SchedulerClusterCombo:
    global _embedded
    if _embedded is None:
        _embedded = SchedulerClusterCombo(n_workers=os.cpu_count() or 1, logging_level="WARNING")
        atexit.register(_shutdown_embedded)
    return _embedded


def _shutdown_embedded() -> None:
    """Disconnect our clients before the cluster goes, so nothing waits on a vanished scheduler."""
    global _embedded
    with _lock:
        clients = list(_by_address.values())
        _by_address.clear()
        cluster, _embedded = _embedded, None
    for client in clients:
        client.disconnect()
    if cluster is not None:
        cluster.shutdown()
