"""Client: the application's handle on a Scaler cluster."""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Mapping
from typing import Any, Callable, Iterable

from scaler.client.arguments import Unserializable, function_name, serialization_error, serialize_arguments
from scaler.client.call_priority import call_priority, checked_key_priorities
from scaler.client.call_sites import CallSites
from scaler.client.client_settings import ClientSettings
from scaler.client.connection import ClientConnection
from scaler.client.display import client_html, client_text
from scaler.client.future import ScalerFuture
from scaler.client.graph import Order, plan_graph
from scaler.client.graph_submission import futures_of_requested_keys, submit_graph
from scaler.client.map_submission import submit_kept_map, submit_map
from scaler.client.object_reference import ObjectReference
from scaler.client.progress import wait_for_futures_with_progress, wait_with_progress
from scaler.client.result_sinks import MapCollector
from scaler.client.shared_arguments import RepeatedArguments, SharedArguments
from scaler.client.stored_arguments import StoredArguments, stored_arguments_of
from scaler.client.unpickled_clients import UnpickledClients
from scaler.client.worker_drain import DrainResult, drain_request, drain_result
from scaler.errors import PayloadTooLargeError, ProtectedModeError
from scaler.protocol import messages as m
from scaler.protocol import stored_payload
from scaler.protocol.messages import SHARED_ARGUMENT_NAME
from scaler.protocol.serializer import DefaultSerializer, Serializer, loads
from scaler.protocol.sharing import DEFAULT_SHARE, checked_share
from scaler.protocol.stored_payload import StoredBuffer
from scaler.protocol.task_warnings import issue_task_warnings
from scaler.store.relay_path import DEFAULT_PROBE_SECONDS
from scaler.utility.blocking import client_nesting_depth, waiting_for_tasks
from scaler.utility.child_exit import close_when_child_ends
from scaler.utility.curve import PeerKeys
from scaler.utility.identifiers import random_object_id
from scaler.utility.scheduler_address import scheduler_address
from scaler.utility.scheduler_addresses import join_scheduler_addresses, parse_scheduler_addresses
from scaler.utility.setting_rules import POSITIVE_SECONDS
from scaler.utility.tags import NO_TAGS, checked_tags, wait_for_tags_ms

DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = 2.0


class Client:
    """Connects to a scheduler and submits work to it.

    >>> with Client(address="tcp://127.0.0.1:2345") as client:
    ...     client.submit(math.sqrt, 16).result()
    4.0

    `share` weighs this client in the scheduler's fair share between clients: while several clients have
    ready tasks, one of share 2.0 is given twice the worker slots of one of share 1.0 (the default). A
    number, finite and above 0; see docs/sharing.md.

    With no `address`, a client inside a task connects to the scheduler that task came from, and elsewhere to
    the one named by the SCALER_ADDRESS environment variable (scaler/utility/scheduler_address.py).

    `stream_output=True` shows what this client's tasks print (standard output, standard error, logging) in
    this process, each line prefixed "[worker task 0x...]" (scaler/client/task_output_display.py); bounded
    per task, with a line saying what was dropped (scaler/worker/output_limits.py). Off by default.
    """

    def __init__(
        self,
        address: str | None = None,
        serializer: Serializer | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        heartbeat_interval_seconds: float = DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        name: str = "",
        profiling: bool = False,
        curve_server_key: str | None = None,
        curve_secret_key: str | None = None,
        wait_for_tags_seconds: float | None = None,
        store_probe_seconds: float = DEFAULT_PROBE_SECONDS,
        share: float = DEFAULT_SHARE,
        stream_output: bool = False,
    ) -> None:
        # ValueError, here: no address to be found, or anything but tcp://, ipc:// or inproc://.
        address = join_scheduler_addresses(parse_scheduler_addresses(scheduler_address(address)))
        if serializer is not None and not isinstance(serializer, Serializer):
            raise TypeError("serializer must be an instance of scaler.Serializer")
        for setting_name, value in (
            ("timeout_seconds", timeout_seconds), ("heartbeat_interval_seconds", heartbeat_interval_seconds),
            ("store_probe_seconds", store_probe_seconds),
        ):
            try:
                POSITIVE_SECONDS.check(value)
            except (TypeError, ValueError) as error:
                raise ValueError(f"{setting_name} {error}") from None
        # ValueError, here: how long a task requiring tags may wait while no connected worker has them.
        tag_wait_ms = wait_for_tags_ms(wait_for_tags_seconds)
        self._share = checked_share(share)  # TypeError or ValueError here, not a refusal by the scheduler
        self._wait_for_tags_seconds = wait_for_tags_seconds
        self._address = address
        self._serializer: Serializer = serializer if serializer is not None else DefaultSerializer()
        self._timeout_seconds = timeout_seconds
        self._heartbeat_interval_seconds = heartbeat_interval_seconds
        self._name = name
        self._profiling = profiling
        self._stream_output = bool(stream_output)
        # As given: a client rebuilt inside a task resolves what was not given from the worker's environment.
        self._curve_key_options = (curve_server_key, curve_secret_key)
        curve_keys = PeerKeys.resolve(curve_server_key, curve_secret_key)
        self._connection = ClientConnection(
            address, name, timeout_seconds, heartbeat_interval_seconds, curve_keys, self._serializer,
            store_probe_seconds, self._share,
        )
        self._connection.connect()
        self._call_sites = CallSites(self._connection, self._serializer, tag_wait_ms, self._stream_output)
        self._shared_arguments = SharedArguments(
            self._connection.send_object, self._connection.send_message, self._store_shared_argument
        )
        # Whoever forgets to disconnect gets the I/O thread stopped when the client is collected or its process ends.
        self._finalizer = close_when_child_ends(weakref.finalize(self, self._connection.close))

    # ------------------------------------------------------------------------------------------ context

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.disconnect()

    def __reduce__(self) -> tuple[Callable[..., Client], tuple[ClientSettings]]:
        # A client passed into a task reconnects from the worker: nested tasks.
        return _reconnect, (ClientSettings(
            address=self._address, serializer=self._serializer, timeout_seconds=self._timeout_seconds,
            heartbeat_interval_seconds=self._heartbeat_interval_seconds, name=self._name, profiling=self._profiling,
            wait_for_tags_seconds=self._wait_for_tags_seconds, share=self._share, stream_output=self._stream_output,
            curve_server_key=self._curve_key_options[0], curve_secret_key=self._curve_key_options[1],
        ),)

    def __repr__(self) -> str:
        return client_text(self)

    def _repr_html_(self) -> str:
        """Jupyter's view: this client and, from one look at the monitor feed, the cluster's workers and tasks."""
        return client_html(self)

    @property
    def address(self) -> str:
        return self._address

    @property
    def name(self) -> str:
        """The name given to Client(...), shown by the scheduler's monitor; "" when none was (host|pid is shown)."""
        return self._name

    @property
    def stream_output(self) -> bool:
        """Whether what this client's tasks print is shown here (Client(stream_output=True))."""
        return self._stream_output

    @property
    def share(self) -> float:
        """This client's weight in the fair share of the workers between clients (docs/sharing.md)."""
        return self._share

    @property
    def is_connected(self) -> bool:
        """True until the client is disconnected or loses its scheduler; then a new Client is needed."""
        return self._connection.is_open

    # ------------------------------------------------------------------------------------------ tasks

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, profiling: bool | None = None,
        tags: Iterable[str] | None = None, priority: int | None = None, keep: bool = False, **kwargs: Any,
    ) -> ScalerFuture:
        """Run `fn(*args, **kwargs)` on the cluster; returns a future of its result.

        `keep=True` keeps the result on the cluster for this client until `future.release()` (or collection,
        or disconnect); `result()` reads it from its store each time. Such a future passed as a top-level
        argument of `submit`, `map` or `get` is read where it is, never through this client (ValueError for a
        future submitted without keep); a task whose argument failed fails with the same error.
        `profiling=True` (or `Client(profiling=True)`) measures the call: see `future.profiling_info()`.
        `tags={"gpu"}` runs it only on a worker started with those tags (`scaler_cluster --tags gpu`); while
        no connected worker has them it waits (see `Client(wait_for_tags_seconds=...)`).
        `priority=10` sends it to a worker before this client's queued tasks of lower priority (an int, higher
        first; default: the priority of the task this call runs in, else 0; see docs/sharing.md). These
        keywords are taken by submit itself, so they never reach `fn`. Raises TypeError here when `fn`'s
        signature cannot take the arguments or `priority` is not an int, SerializationError when one of the
        arguments (or `fn`) cannot be serialized.
        """
        connection = self._connection
        connection.check_open()
        if not callable(fn):
            raise TypeError(f"submit() needs a callable as its first argument, got {type(fn).__name__}")
        required_tags = checked_tags(tags, "submit()") if tags is not None else NO_TAGS
        task_priority = call_priority(priority, "submit()")
        call_sites = self._call_sites
        shape = call_sites.call_shape(fn)
        if shape is not None and not (shape.fits_call(len(args), kwargs) if kwargs else shape.fits(len(args))):
            problem = shape.problem(args, kwargs)
            if problem is not None:
                raise TypeError(problem)
        shared = self._shared_arguments
        payloads: list[bytes] = []
        object_positions: list[int] = []
        references: list[tuple[int, int]] = []  # kept futures among the arguments
        storing = self._stored_arguments()
        try:
            serialize = self._serializer.serialize
            keywords: tuple[str, ...] = ()
            try:
                serialize_arguments(
                    args, serialize, shared, payloads, object_positions, storing, references, connection
                )
                if kwargs:
                    keywords = tuple(kwargs)
                    serialize_arguments(
                        kwargs.values(), serialize, shared, payloads, object_positions, storing, references, connection
                    )
            except Unserializable as failure:
                # `keywords` is set once the positional arguments are done.
                what = f"keyword argument {keywords[failure.position]!r}" if keywords else (
                    f"positional argument {failure.position}"
                )
                raise serialization_error(f"{what} of {function_name(fn)}", failure.__cause__) from failure.__cause__
            profiled = self._profiling if profiling is None else profiling
            function_id = call_sites.function_id(fn)
            signature = call_sites.signature(
                function_id, len(payloads), keywords, client_nesting_depth(), profiled, required_tags, task_priority,
                keep,
            )
            task_id = connection.next_task_id()
            future = ScalerFuture(task_id, connection, self._serializer, keep)
            connection.submit_task(signature, task_id, payloads, future, object_positions, references)
        except BaseException:
            if object_positions:  # nothing was submitted: the shared arguments claimed so far are not used
                shared.release([payloads[position] for position in object_positions])
                self._delete_stored(storing)
            raise
        if object_positions:
            named = [payloads[position] for position in object_positions]
            future.add_done_callback(lambda _: shared.release(named))
            if storing is not None and storing.stored_ids:
                future.add_done_callback(lambda _: self._delete_stored(storing))
        return future

    def _stored_arguments(self) -> StoredArguments | None:
        """Where this call's large arguments go: the home store; None without one."""
        return stored_arguments_of(self._connection, self._serializer)

    def _delete_stored(self, storing: StoredArguments | None) -> None:
        """The tasks of a call are done (or were never submitted): the arguments it stored are not needed."""
        if storing is not None and storing.stored_ids and self._connection.is_open:
            self._connection.send_message(m.DeleteObjects(object_ids=storing.stored_ids))

    def send_object(self, obj: Any, name: str | None = None) -> ObjectReference:
        """Send `obj` to the cluster once; pass the returned reference as a task argument to use it."""
        connection = self._connection
        connection.check_open()
        object_id = random_object_id()
        stores = connection.stores
        try:
            if stores.home:
                # Serialized once, straight into the home store when large (its buffers out-of-band).
                prepared = stored_payload.prepare(obj, self._serializer)
                connection.limits.check_size(prepared.size, f"object {name!r}" if name else "an object")
                if prepared.size >= stores.inline_limit:
                    stored = connection.store_or_none(
                        lambda: stores.put_prepared(object_id, prepared, name or "")
                    )
                    if stored is not None:
                        self._call_sites.send_serializer()
                        connection.remember_stored(stored, obj)
                        connection.send_object(stored)
                        connection.wake()
                        return ObjectReference(name=name or "", object_id=object_id, size=stored.size)
            payload = self._serializer.serialize(obj)
        except PayloadTooLargeError:
            raise
        except Exception as error:
            named = f" (name {name!r})" if name else ""
            raise serialization_error(f"the object given to send_object{named}", error) from error
        reference = ObjectReference(name=name or "", object_id=object_id, size=len(payload))
        self._call_sites.send_serializer()
        connection.send_object(m.ObjectPayload(object_id=reference.object_id, payload=payload, name=name or ""))
        connection.wake()
        return reference

    def _store_shared_argument(self, object_id: bytes, argument: Any) -> m.ObjectPayload | None:
        """A large bytes or str argument straight into the home store (one copy); None without a store."""
        connection = self._connection
        if not connection.stores.home:
            return None
        # Not waiting for the seal's answer: a task that asks first waits in the store for the seal, and the
        # argument is remembered to be put again should the store refuse it (the object is then reported lost).
        prepared = stored_payload.prepare(argument, self._serializer)
        connection.limits.check_size(prepared.size, "an argument")  # before anything reads its bytes
        stored = connection.store_or_none(
            lambda: connection.stores.put_prepared(object_id, prepared, SHARED_ARGUMENT_NAME, False)
        )
        if stored is not None:
            connection.remember_stored(stored, argument)
        return stored

    def map(
        self, fn: Callable[..., Any], iterable: Iterable[tuple], *, progress: bool = False,
        tags: Iterable[str] | None = None, priority: int | None = None, keep: bool = False,
    ) -> list[Any]:
        """Run `fn(*args)` for every tuple of arguments; returns the results in order.

        `tags` and `priority` as for `submit`, for every call. A kept future (`submit(..., keep=True)`) in a
        tuple is resolved on the cluster, as for `submit`. With `keep=True`, returns at once a list of kept
        futures instead of the results (see `submit`'s keep).

        The function is serialized once for the whole call, and so is an argument object found in
        several tuples (the same object, `is`): sent once if large, and deleted when the map is over.
        If any call raises, the rest are canceled and the first failure (in argument order, among
        those seen) is raised. A tuple `fn` cannot take is a TypeError, an argument that cannot be
        serialized a SerializationError, both naming the tuple, raised here.
        """
        connection = self._connection
        connection.check_open()
        if not callable(fn):
            raise TypeError(f"map() needs a callable as its first argument, got {type(fn).__name__}")
        if keep:
            return submit_kept_map(lambda *arguments: self.submit(
                fn, *arguments, tags=tags, priority=priority, keep=True
            ), iterable)
        required_tags = checked_tags(tags, "map()")
        map_priority = call_priority(priority, "map()")
        shape = self._call_sites.call_shape(fn)
        function_id = self._call_sites.function_id(fn)
        argument_tuples = list(iterable)
        # Holding argument_tuples keeps every argument alive, so an id names one object for the whole call.
        storing = self._stored_arguments()
        repeated = RepeatedArguments(argument_tuples, connection.send_object, storing)
        collector = MapCollector(connection.reserve_task_ids(len(argument_tuples)), len(argument_tuples))
        try:
            try:
                submit_map(
                    connection, self._call_sites, self._serializer.serialize, self._profiling, fn, shape,
                    function_id, argument_tuples, collector, repeated, required_tags, map_priority, storing,
                )
            except BaseException:
                # A bad argument further on (too large, not a tuple): the tasks already queued are not wanted.
                self._forget_and_cancel(collector.task_ids)
                raise
            with waiting_for_tasks():
                if progress:
                    total = len(argument_tuples)
                    wait_with_progress(collector.finished, total, lambda: total - collector.remaining, "map")
                else:
                    collector.finished.wait()
            if collector.errors:
                self._forget_and_cancel(collector.task_ids)
            if collector.warnings:
                issue_task_warnings(list(collector.warnings))
            if collector.errors:
                raise collector.errors[min(collector.errors)]
        finally:
            if repeated.hidden and connection.is_open:
                # After the cancel: the scheduler keeps an object a still-running task names (until clear()).
                connection.send_message(m.DeleteObjects(object_ids=repeated.hidden))
            self._delete_stored(storing)
        serializer = self._serializer
        deserialize = serializer.deserialize
        return [
            deserialize(payload) if type(payload) is not StoredBuffer else loads(serializer, payload)
            for payload in collector.payloads
        ]

    def _forget_and_cancel(self, task_ids: range) -> None:
        self._connection.forget(task_ids)
        self._connection.cancel_tasks(list(task_ids))

    def get(
        self, graph: dict, keys: Any, block: bool = True, *, progress: bool = False, order: Order = None,
        tags: Iterable[str] | None = None, priority: int | None = None,
        priorities: Mapping[Hashable, int] | None = None,
    ) -> dict[Hashable, Any]:
        """Compute the requested keys of a task graph; the whole graph goes to the scheduler at once.

        `graph` maps keys to literals, callables (returned as they are), aliases (another key) or tasks
        `(callable, arg, ...)` whose arguments may be keys, literals, nested tasks, or lists/tuples of
        those. Returns `{key: value}`; with `block=False`, `{key: future}` instead.
        An argument, or a value, is a key exactly when the graph has it (`arg in graph`, whatever its
        type); anything else is a literal passed as it is, a string included: in `{"x": (inc, "y")}`
        with no key "y", `inc` receives the string "y" and the task fails when it runs.
        Raised here, before anything runs: a requested key missing from the graph or requested twice
        (a KeyError; a missing one is a ValueError too), a cycle (a ValueError and a
        graphlib.CycleError), and a task whose callable cannot take its arguments (TypeError). A failed
        task fails every requested key that needs it.
        An argument object found in several tasks (the same object, `is`) is serialized once, and sent
        once if large (see `Client.map`).
        `order` picks the topological ordering (see `plan_graph`): None, the pure-Python depth-first
        walk (the default, and the fastest measured); "python", Kahn's algorithm; "graphblas", sparse
        matrix products from the optional `graphblas` extra (python-graphblas).
        `tags` and `priority` as for `submit`, for every task of the graph; `priorities={key: 5}` gives the
        tasks at those keys their own priority instead (dask's `annotate(priority=...)` arrives this way).
        A value may be a kept future of this client (`submit(..., keep=True)`, `persist_graph`): tasks that
        name its key read its result on the cluster, and a requested key holding one gets its `result()`.
        """
        outcome = self._run_graph(graph, keys, order, tags, priority, priorities, keep=False)
        if not block:
            return outcome
        with waiting_for_tasks():
            if progress:
                wait_for_futures_with_progress(list(outcome.values()))
            return {key: future.result() for key, future in outcome.items()}

    def persist_graph(self, graph: dict, keys: Any, *, tags: Iterable[str] | None = None,
                      priority: int | None = None) -> dict[Hashable, ScalerFuture]:
        """Run a task graph as `get` does, keeping the results of the requested keys on the cluster.

        Returns `{key: kept future}` at once (see `submit`'s keep). A graph holding them as values, given to
        `get` or `scaler.get`, computes on them where they are: they never pass through this client. A literal
        at a requested key is kept too; two requested keys aliasing one task share one future.
        """
        return self._run_graph(graph, keys, None, tags, priority, None, keep=True)

    def _run_graph(
        self, graph: dict, keys: Any, order: Order, tags: Iterable[str] | None, priority: int | None,
        priorities: Mapping[Hashable, int] | None, keep: bool,
    ) -> dict[Hashable, Any]:
        """Submit what the requested keys need; returns a future for each requested key."""
        where = "persist_graph()" if keep else "get()"
        self._connection.check_open()
        required_tags = checked_tags(tags, where)
        graph_priority = call_priority(priority, where)
        key_priorities = checked_key_priorities(priorities, where)
        requested = list(keys) if isinstance(keys, (list, set)) else [keys]
        plan = plan_graph(graph, requested, order=order)
        futures = submit_graph(
            plan.calls, set(plan.targets.values()), self._call_sites, self._connection, self._serializer,
            self._profiling, required_tags, graph_priority, key_priorities, plan.futures, keep,
        )

        def keep_literal(value: Any) -> ScalerFuture:
            return self.submit(_literal, value, keep=True, tags=tags, priority=priority)

        return futures_of_requested_keys(plan, requested, futures, keep_literal if keep else None)

    # ------------------------------------------------------------------------------------------ session

    def clear(self) -> None:
        """Cancel every unfinished task of this client and drop its objects; the client stays usable."""
        self._connection.request(m.ClearRequest(), m.ClearResponse, self._timeout_seconds)
        self._call_sites.forget_sent()
        self._shared_arguments.forget_all()
        self._connection.sent_objects.forget_all()
        self._connection.stores.let_go_all()
        self._connection.cancel_everything_pending()

    def drain_workers(self, worker_names: Iterable[str]) -> DrainResult:
        """Ask the scheduler to send these workers (named as the monitor shows them) no new task, and to move
        the tasks they hold and have not started to other workers; what they run finishes there. Do this
        before stopping a worker on purpose: once the monitor shows it draining and holding no task, stopping
        it costs nothing. Names of no connected worker come back in `unknown`. Draining again is harmless;
        with every worker draining, tasks wait for a new worker. Raises ConnectionFailedError if the
        scheduler does not answer within the client's timeout."""
        request = drain_request(worker_names)
        response = self._connection.request(request, m.DrainWorkersResponse, self._timeout_seconds)
        assert isinstance(response, m.DrainWorkersResponse)
        return drain_result(response)

    def disconnect(self) -> None:
        """Leave the scheduler; unfinished tasks of this client are canceled. Safe to call twice."""
        self._finalizer()

    def shutdown(self) -> None:
        """Ask the scheduler to stop the whole cluster; refused (ProtectedModeError) in protected mode."""
        try:
            response = self._connection.request(m.ShutdownRequest(), m.ShutdownResponse, self._timeout_seconds)
        finally:
            self.disconnect()
        assert isinstance(response, m.ShutdownResponse)
        if not response.accepted:
            raise ProtectedModeError(response.reason)


def _literal(value: Any) -> Any:
    """A task that returns its argument: a literal of a persisted graph, kept on the cluster like the rest."""
    return value


_unpickled_clients: UnpickledClients[Client] = UnpickledClients()


def _reconnect(settings: ClientSettings) -> Client:
    return _unpickled_clients.shared(settings.reuse_key(), lambda: Client(
        address=settings.address,
        serializer=settings.serializer,
        timeout_seconds=settings.timeout_seconds,
        heartbeat_interval_seconds=settings.heartbeat_interval_seconds,
        name=settings.name,
        profiling=settings.profiling,
        curve_server_key=settings.curve_server_key,
        curve_secret_key=settings.curve_secret_key,
        wait_for_tags_seconds=settings.wait_for_tags_seconds,
        share=settings.share,
        stream_output=settings.stream_output,
    ))
