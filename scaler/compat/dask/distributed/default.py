"""The default client: the one `get_client()`, `wait`, `Future(key)` and dask's own `compute`/`persist` use.

A client made with `set_as_default=True` (the default) becomes dask's scheduler while it is the newest such
client still open: dask's config `scheduler` is set to its `get` (dask.persist then calls its `persist`,
keeping the results on the cluster), and dataframe shuffles use tasks. When it closes, the next newest
open default client takes over, and after the last one dask's config is as it was before the first.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scaler.compat.dask.distributed.client import Client

_CONFIG_KEYS = ("scheduler", "dataframe.shuffle.method")

_lock = threading.Lock()
_clients: list[Client] = []
_config_before: dict[str, Any] | None = None
_absent = object()


def default_client(c: Client | None = None) -> Client:
    """`c` if given, else the newest open client made with set_as_default=True; ValueError if none."""
    if c is not None:
        return c
    with _lock:
        if _clients:
            return _clients[-1]
    raise ValueError(
        "No clients found\nStart a client and point it to the scheduler address\n"
        "  from scaler.compat.dask.distributed import Client\n  client = Client('tcp://ip-of-scheduler:port')\n"
    )


def make_default(client: Client) -> None:
    global _config_before
    import dask

    with _lock:
        if not _clients:
            _config_before = {key: dask.config.get(key, _absent) for key in _CONFIG_KEYS}
        _clients.append(client)
        dask.config.set({"scheduler": client.get, "dataframe.shuffle.method": "tasks"})


def forget(client: Client) -> None:
    """`client` is closing: the newest remaining default client becomes dask's scheduler, or none."""
    global _config_before
    import dask

    with _lock:
        if client not in _clients:
            return
        _clients.remove(client)
        if _clients:
            dask.config.set({"scheduler": _clients[-1].get})
            return
        before, _config_before = _config_before or {}, None
        for key, value in before.items():
            if value is _absent:
                _unset(dask.config.config, key.split("."))
            else:
                dask.config.set({key: value})


def _unset(config: dict, path: list[str]) -> None:
    for part in path[:-1]:
        config = config.get(part, {})
        if not isinstance(config, dict):
            return
    config.pop(path[-1], None)
