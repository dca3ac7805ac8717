"""ScalerBackend: joblib's parallel backend "scaler". Each batch of calls joblib makes is one Scaler task.

joblib keeps doing what it does for every backend: it batches calls (auto-sizing batches so each
takes a fraction of a second), keeps a bounded number in flight (`pre_dispatch`), orders results,
applies `timeout`, prints progress and aborts on the first error. This backend only submits a batch
with `Client.submit`, hands joblib the finished future, and cancels futures when joblib aborts.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sys
import threading
from typing import Any, Callable, ContextManager, Iterable

from joblib._parallel_backends import (
    AutoBatchingMixin,
    FallbackToBackend,
    ParallelBackendBase,
    SequentialBackend,
    ThreadingBackend,
)
from joblib.parallel import register_parallel_backend

from scaler.client.client import Client
from scaler.compat import cluster_choice
from scaler.compat.futures.cancelling import cancel_without_waiting
from scaler.compat.joblib.callback_thread import CallbackThread
from scaler.protocol.sharing import checked_priority
from scaler.utility.fork_safety import fix_after_fork
from scaler.utility.tags import checked_tags

BACKEND_NAME = "scaler"
# Long enough for a callback that serializes a large batch, short enough that a stuck one is reported.
_CALLBACK_STOP_SECONDS = 30.0

# Batches this worker process is running now. A Parallel call inside one of them must not go back
# to a cluster: with no use(...) or SCALER_ADDRESS in a worker it would start a cluster of its own
# there, and a task waiting on tasks of the same cluster can hold every worker (a deadlock).
_running_batches = 0
_running_lock = threading.Lock()


class ScalerBackend(AutoBatchingMixin, ParallelBackendBase):
    """Runs joblib batches on the cluster chosen as for every Scaler adapter.

    That is the client given to `scaler.compat.cluster_choice.use(...)`, else the scheduler in
    `SCALER_ADDRESS`, else an embedded local cluster (one worker per core, stopped at exit). The
    choice is made when a Parallel call starts.

    `n_jobs` is a hint for how many batches to keep in flight and how finely to cut the work; the
    scheduler balances whatever arrives over the workers it has. The client cannot see how many
    workers that is, so the capacity used for `n_jobs=-1` (and `None`, the default here) is the
    `n_workers` given to the backend, e.g. `parallel_config(backend="scaler", n_workers=64)`, or
    else this machine's core count, which is the size of the embedded cluster. `n_jobs=-2` is one
    less, as for loky; a positive `n_jobs` is taken as it is; `n_jobs=1` runs in the caller, as
    with every joblib backend.

    Inside a task, a nested Parallel call runs on threads in that worker (joblib's usual nested
    backend), even when it names "scaler": see `_running_batches`.

    In a child forked from a process that used the backend (joblib's "multiprocessing" backend, a
    multiprocessing pool), a Parallel call connects anew to the cluster chosen for the parent, with
    the settings of a Client given to `use(...)`. joblib's loky workers are new interpreters
    instead, and joblib registers no backend there but its own (and dask's): a
    `Parallel(backend="scaler")` in a function running on loky
    raises `ValueError: Invalid backend: scaler` unless scaler is registered in that worker, with
    `parallel_config(backend="loky", initializer=scaler.compat.joblib.register)` or by calling
    `scaler.compat.joblib.register()` in the function (importing scaler in the module that defines
    the function does it too, unless that module is the main script). Those workers find the
    cluster through `SCALER_ADDRESS`, which they inherit; without it each would start an embedded
    cluster of its own.

    While a batch runs, the BLAS and OpenMP thread pools of its worker process are limited to
    `inner_max_num_threads` threads, 1 unless set with
    `parallel_config(backend="scaler", inner_max_num_threads=N)`. A worker runs one task per core
    already, and pools as wide as the machine in every worker spin against each other (scikit-learn
    fits ran tens of times slower). loky does the same for its workers. It takes threadpoolctl
    (installed with scikit-learn), and applies to libraries loaded when the batch starts, so
    to numpy and whatever the batch's arguments needed.

    Warnings the calls raise are issued again when joblib collects the batch's result, which joblib
    does for this backend on the backend's callback thread, before the Parallel call can return that
    result. Warning filters are process-wide in CPython (unless context-aware, as on free-threaded
    builds), so the caller's filters apply: `catch_warnings` or `pytest.warns` around the Parallel
    call sees them, and "error" makes the call raise the warning as a failed batch.

    `parallel_config(backend="scaler", priority=5)` gives every batch that priority among the tasks of the
    client (higher first; see `Client.submit` and docs/sharing.md), as `tags={"gpu"}` gives them tags.

    `parallel_config(backend="scaler", stream_output=True)` shows what the calls print in this process, as
    `Client(stream_output=True)` does.
    """

    supports_retrieve_callback = True
    supports_inner_max_num_threads = True
    supports_sharedmem = False
    uses_threads = False
    default_n_jobs = -1

    def __init__(
        self, nesting_level: int | None = None, inner_max_num_threads: int | None = None, n_workers: int | None = None,
        tags: Iterable[str] | None = None, priority: int | None = None, stream_output: bool = False,
    ) -> None:
        # `parallel_config(backend="scaler", tags={"gpu"}, priority=5)`: joblib passes the keywords here. Every
        # batch then runs only on workers with these tags, at this priority (see Client.submit).
        self._tags = checked_tags(tags, "the scaler joblib backend's tags") if tags is not None else None
        self._priority = checked_priority(priority, "the scaler joblib backend") if priority is not None else None
        if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1):
            raise ValueError(f"n_workers must be a positive integer (the cluster's worker count), got {n_workers!r}")
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads)
        self._n_workers = n_workers
        self._stream_output = bool(stream_output)
        self._client: Client | None = None
        self._lock = threading.Lock()
        self._outstanding: set[concurrent.futures.Future] = set()
        self._callbacks = CallbackThread("scaler-joblib-callbacks")
        # How many tasks this backend submitted, each one batch of calls; lets tests see the batching.
        self.tasks_submitted = 0
        fix_after_fork(self)

    # ------------------------------------------------------------------------------------------ sizing

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        capacity = self._n_workers or os.cpu_count() or 1
        if n_jobs is None:
            return capacity
        n_jobs = int(n_jobs)
        if n_jobs < 0:
            return max(capacity + 1 + n_jobs, 1)
        return n_jobs

    def configure(self, n_jobs: int | None = 1, parallel: Any = None, **_memmapping_options: Any) -> int:
        # The memmapping options (max_nbytes, temp_folder, mmap_mode) are for workers sharing this
        # machine's disk; ours need not, so arrays travel inside the batch like any argument.
        if _inside_a_task():
            raise FallbackToBackend(self._nested_fallback())
        self.parallel = parallel
        return self.effective_n_jobs(n_jobs)

    def _nested_fallback(self) -> ParallelBackendBase:
        # What joblib itself uses below a process-based backend: threads, then sequential deeper down.
        level = self.nesting_level or 0
        if level <= 1:
            return ThreadingBackend(nesting_level=level)
        return SequentialBackend(nesting_level=level)

    # ------------------------------------------------------------------------------------------ a call

    def start_call(self) -> None:
        self._client = cluster_choice.current_client(self._stream_output)
        self._callbacks.start()

    def stop_call(self) -> None:
        self._callbacks.stop(_CALLBACK_STOP_SECONDS)
        self._client = None

    def submit(
        self, func: Callable[[], list], callback: Callable[[Any], None] | None = None
    ) -> concurrent.futures.Future:
        client = self._client
        if client is None:  # joblib calls start_call() first; this keeps working should that change
            client = self._client = cluster_choice.current_client(self._stream_output)
            self._callbacks.start()
        future: concurrent.futures.Future
        try:
            future = client.submit(
                _run_batch, func, self.inner_max_num_threads or 1, tags=self._tags, priority=self._priority
            )
        except Exception as error:
            # joblib counts the batch as dispatched before calling us, and this may run on our
            # callback thread, where raising would leave joblib waiting for the batch forever. A
            # failed future reaches joblib like a failed batch, and joblib raises it to the caller.
            future = concurrent.futures.Future()
            future.set_exception(error)
        with self._lock:
            self.tasks_submitted += 1
            if not future.done():
                self._outstanding.add(future)
        future.add_done_callback(lambda done: self._on_done(done, callback))
        return future

    def _on_done(self, future: concurrent.futures.Future, callback: Callable[[Any], None] | None) -> None:
        """Where the future settled (the client's I/O thread; joblib's, inline, if it was done already): stop
        tracking, pass the future on to joblib's callback on our thread."""
        with self._lock:
            self._outstanding.discard(future)
        if callback is not None:
            self._callbacks.post(callback, future)

    def retrieve_result_callback(self, out: concurrent.futures.Future) -> list:
        # Raises what the batch raised, with its original type (and the remote traceback as cause).
        return out.result()

    def abort_everything(self, ensure_ready: bool = True) -> None:
        """joblib gives up on the call (an error, a timeout, an abandoned generator): stop its batches.

        Queued batches are cancelled and running ones stopped (their workers replace the processors
        that ran them), as loky and multiprocessing terminate their workers here, and as joblib tells
        the user ("tasks which were still being processed by the workers have been cancelled"). A
        batch left running would hold its worker for as long as it takes, and the next call's batches
        would queue behind it. The cancels go out at once but are not waited for; the backend stays
        usable either way.
        """
        with self._lock:
            futures = list(self._outstanding)
            self._outstanding.clear()
        cancel_without_waiting(futures, force=True)

    def terminate(self) -> None:
        """The end of a call (joblib's own process backends do the same): the batch size this call's calls grew to
        is not the next call's, whose calls may be slower (a batch of hundreds of them would run on one worker)."""
        self.stop_call()
        self.reset_batch_stats()

    def _after_fork_in_child(self) -> None:
        """In a forked child, the next call starts from nothing: the parent's futures stay the parent's."""
        self._lock = threading.Lock()
        self._outstanding = set()
        self._client = None


def _run_batch(batch: Callable[[], list], inner_threads: int) -> list:
    """The task: run one joblib batch, marked so that Parallel calls inside it stay in this worker."""
    global _running_batches
    with _running_lock:
        _running_batches += 1
    try:
        with _thread_pools_limited_to(inner_threads):
            return batch()
    finally:
        with _running_lock:
            _running_batches -= 1


# The worker's thread pools as threadpoolctl found them, and how many modules were loaded then.
_controller: tuple[int, Any] | None = None


def _thread_pools_limited_to(threads: int) -> ContextManager[object]:
    """Limit the BLAS/OpenMP pools loaded in this worker while a batch runs.

    Looking for the pools takes about a millisecond (threadpoolctl scans every loaded library), more
    than a batch of tiny calls takes to run, so the scan is kept and made again only once more modules
    are loaded, since a new pool comes with a new extension module. Limiting with it takes 10 us.
    Without numpy there is no pool to limit (importing joblib loads numpy when it is installed).
    """
    global _controller
    if "numpy" not in sys.modules:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return contextlib.nullcontext()
    loaded = len(sys.modules)
    if _controller is None or _controller[0] != loaded:
        _controller = (loaded, ThreadpoolController())
    return _controller[1].limit(limits=threads)


def _inside_a_task() -> bool:
    return _running_batches > 0


def register() -> None:
    """Make `backend="scaler"` mean this backend in joblib.Parallel, parallel_config and parallel_backend."""
    register_parallel_backend(BACKEND_NAME, ScalerBackend)


# Importing this module registers the backend, so that an import of joblib which this very module
# set off (a worker unpickling _run_batch) still ends with the backend registered.
register()
