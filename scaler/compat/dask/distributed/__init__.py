"""dask.distributed's API on a Scaler cluster: change one import.

    from dask.distributed import Client, LocalCluster, wait, as_completed
    from scaler.compat.dask.distributed import Client, LocalCluster, wait, as_completed

Offered: Client, LocalCluster, Future, wait (ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION), as_completed,
fire_and_forget, get_client, worker_client, secede, rejoin, default_client, futures_of, progress, and the
exceptions a future raises, CancelledError and TimeoutError (the same classes as dask.distributed's).
While a Client made with set_as_default=True is open, dask's own `compute` and `persist` run on its cluster.
See client.py for what behaves differently from dask.distributed, and why.

Left out, because each needs state or services a Scaler scheduler does not keep: the coordination
primitives (Event, Lock, Semaphore, Queue, Variable, MultiLock, Pub/Sub) and actors (scheduler-side
shared state); get_worker, Worker, Nanny, Scheduler, SSHCluster, SpecCluster and worker plugins (dask's
own servers); performance_report and get_task_stream (dask's dashboard and task-stream plugin);
Client.run and upload_file (Scaler does not address single workers: they raise NotImplementedError).
"""

from builtins import TimeoutError  # dask.distributed's is the builtin too: importable from here, as from there
from concurrent.futures import CancelledError

from scaler.compat.dask.distributed.arguments import futures_in as futures_of
from scaler.compat.dask.distributed.as_completed import as_completed
from scaler.compat.dask.distributed.client import Client
from scaler.compat.dask.distributed.default import default_client
from scaler.compat.dask.distributed.future import Future
from scaler.compat.dask.distributed.local_cluster import LocalCluster
from scaler.compat.dask.distributed.progress import progress
from scaler.compat.dask.distributed.waiting import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION, wait
from scaler.compat.dask.distributed.worker_context import (
    fire_and_forget,
    get_client,
    rejoin,
    secede,
    worker_client,
)

__all__ = [
    "ALL_COMPLETED", "FIRST_COMPLETED", "FIRST_EXCEPTION", "CancelledError", "Client", "Future", "LocalCluster",
    "TimeoutError", "as_completed", "default_client", "fire_and_forget", "futures_of", "get_client", "progress",
    "rejoin", "secede", "wait", "worker_client",
]

