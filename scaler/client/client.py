"""Client: the application's handle on a Scaler cluster."""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import weakref
from collections.abc import Hashable
from typing import Any, Callable, Iterable, Sequence

import cloudpickle

from scaler.client.call_check import CallShape, call_shape
from scaler.client.connection import ClientConnection, MapCollector
from scaler.client.future import ScalerFuture
from scaler.client.graph import Order, PlannedCall, TemplateCall, plan_graph
from scaler.client.object_reference import ObjectReference
from scaler.client.progress import wait_with_progress
from scaler.client.shared_arguments import (
    IMMUTABLE_SIZED_TYPES,
    SharedArgument,
    SharedArguments,
    repeated_argument_ids,
)
from scaler.client.task_warnings import issue_task_warnings
from scaler.errors import ProtectedModeError, ScalerError, SerializationError
from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer, Serializer
from scaler.protocol.task_signature import TaskSignature
from scaler.utility.blocking import client_nesting_depth, waiting_for_tasks
from scaler.utility.curve import PeerKeys
from scaler.utility.identifiers import content_object_id, random_object_id
from scaler.utility.setting_rules import POSITIVE_SECONDS
from scaler.utility.zmq_config import zmq_address_text

DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = 2.0

# Tasks of a map go out in chunks this size, so the scheduler starts dispatching before the map is built.
_MAP_CHUNK = 1000
# Call sites remembered, so that a function submitted again is not serialized again.
_FUNCTION_CACHE_SIZE = 1024


class Client:
    """Connects to a scheduler and submits work to it.

    >>> with Client(address="tcp://127.0.0.1:2345") as client:
    ...     client.submit(math.sqrt, 16).result()
    4.0
    """

    def __init__(
        self,
        address: str,
        serializer: Serializer | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        heartbeat_interval_seconds: float = DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        name: str = "",
        profiling: bool = False,
        curve_server_key: str | None = None,
        curve_secret_key: str | None = None,
    ) -> None:
        address = zmq_address_text(address)  # ValueError, here, for anything but tcp://, ipc:// or inproc://
        if serializer is not None and not isinstance(serializer, Serializer):
            raise TypeError("serializer must be an instance of scaler.Serializer")
        for setting_name, value in (
            ("timeout_seconds", timeout_seconds), ("heartbeat_interval_seconds", heartbeat_interval_seconds)
        ):
            try:
                POSITIVE_SECONDS.check(value)
            except (TypeError, ValueError) as error:
                raise ValueError(f"{setting_name} {error}") from None
        self._address = address
        self._serializer: Serializer = serializer if serializer is not None else DefaultSerializer()
        self._timeout_seconds = timeout_seconds
        self._heartbeat_interval_seconds = heartbeat_interval_seconds
        self._profiling = profiling
        self._serializer_id = b""
        self._sent_object_ids: set[bytes] = set()
        self._function_ids: collections.OrderedDict[int, tuple[Callable, bytes]] = collections.OrderedDict()
        # Kept apart from _function_ids: checked before anything is serialized, and not dropped by clear().
        self._call_shapes: dict[int, tuple[Callable, CallShape | None]] = {}
        self._template_calls: dict[int, TemplateCall] = {}
        self._signatures: dict[tuple, TaskSignature] = {}
        self._lock = threading.Lock()
        curve_keys = PeerKeys.resolve(curve_server_key, curve_secret_key)
        self._connection = ClientConnection(address, name, timeout_seconds, heartbeat_interval_seconds, curve_keys)
        self._connection.connect()
        self._shared_arguments = SharedArguments(self._connection.send_object, self._connection.send_message)
        # Whoever forgets to disconnect still gets the I/O thread stopped when the client is collected.
        self._finalizer = weakref.finalize(self, self._connection.close)
        if type(self._serializer) is not DefaultSerializer:
            payload = cloudpickle.dumps(self._serializer)
            self._serializer_id = content_object_id(payload)

    # ------------------------------------------------------------------------------------------ context

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.disconnect()

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # A client passed into a task reconnects from the worker: nested tasks.
        return (
            _reconnect,
            (self._address, self._serializer, self._timeout_seconds, self._heartbeat_interval_seconds, self._profiling),
        )

    @property
    def address(self) -> str:
        return self._address

    # ------------------------------------------------------------------------------------------ tasks

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, profiling: bool | None = None, **kwargs: Any
    ) -> ScalerFuture:
        """Run `fn(*args, **kwargs)` on the cluster; returns a future of its result.

        `profiling=True` (or `Client(profiling=True)`) measures the call: see `future.profiling_info()`.
        The keyword is taken by submit itself, so it never reaches `fn`. Raises TypeError here when `fn`'s
        signature cannot take the arguments, SerializationError when one of them (or `fn`) cannot be serialized.
        """
        self._connection.check_open()
        if not callable(fn):
            raise TypeError(f"submit() needs a callable as its first argument, got {type(fn).__name__}")
        shape = self._call_shape(fn)
        if shape is not None and not (shape.fits_call(len(args), kwargs) if kwargs else shape.fits(len(args))):
            problem = shape.problem(args, kwargs)
            if problem is not None:
                raise TypeError(problem)
        object_positions: list[int] = []
        shared: list[SharedArgument] = []
        connection = self._connection
        try:
            try:
                payloads = self._serialize_submit_arguments(args, object_positions, shared)
                keywords: tuple[str, ...] = ()
                if kwargs:
                    keywords = tuple(kwargs)
                    payloads.extend(
                        self._serialize_submit_arguments(kwargs.values(), object_positions, shared, len(payloads))
                    )
            except _Unserializable as failure:
                position = failure.position
                what = f"positional argument {position}" if position < len(args) else (
                    f"keyword argument {tuple(kwargs)[position - len(args)]!r}"
                )
                raise _serialization_error(f"{what} of {_function_name(fn)}", failure.__cause__) from failure.__cause__
            profiled = self._profiling if profiling is None else profiling
            function_id = self._function_id(fn)
            signature = self._signature(function_id, len(payloads), keywords, client_nesting_depth(), profiled)
            task_id = connection.next_task_id()
            future = ScalerFuture(task_id, connection, self._serializer)
            connection.submit_task(signature, task_id, payloads, future, object_positions)
        except BaseException:
            if shared:  # nothing was submitted: the shared arguments claimed so far are not used
                self._shared_arguments.release(shared)
            raise
        if shared:
            release = self._shared_arguments.release
            future.add_done_callback(lambda _: release(shared))
        return future

    def send_object(self, obj: Any, name: str | None = None) -> ObjectReference:
        """Send `obj` to the cluster once; pass the returned reference as a task argument to use it."""
        self._connection.check_open()
        try:
            payload = self._serializer.serialize(obj)
        except Exception as error:
            named = f" (name {name!r})" if name else ""
            raise _serialization_error(f"the object given to send_object{named}", error) from error
        reference = ObjectReference(name=name or "", object_id=random_object_id(), size=len(payload))
        self._serializer_object()
        self._connection.send_object(m.ObjectPayload(object_id=reference.object_id, payload=payload, name=name or ""))
        self._connection.wake()
        return reference

    def _serialize_submit_arguments(
        self, arguments: Iterable[Any], object_positions: list[int], shared: list[SharedArgument], offset: int = 0
    ) -> list:
        """Serialize each argument; an ObjectReference, or a large bytes or str already on the cluster for
        another unfinished task, travels as its object id (noted in object_positions, and in `shared`)."""
        serialize = self._serializer.serialize
        payloads = []
        position = offset
        try:
            for position, argument in enumerate(arguments, offset):
                kind = type(argument)
                if kind is ObjectReference:
                    payloads.append(argument.object_id)
                    object_positions.append(position)
                elif kind in IMMUTABLE_SIZED_TYPES and len(argument) >= m.LARGE_PAYLOAD_BYTES:
                    entry = self._shared_arguments.claim(argument, serialize)
                    shared.append(entry)
                    payloads.append(entry.object_id)
                    object_positions.append(position)
                else:
                    payloads.append(serialize(argument))
        except ScalerError:
            raise
        except Exception as error:
            raise _Unserializable(position) from error
        return payloads

    def _serialize_arguments(
        self, arguments: Iterable[Any], object_positions: list[int], offset: int, repeated: dict[int, Any],
        hidden: list[bytes],
    ) -> list:
        """Serialize each argument of a map task; an ObjectReference travels as its object id, noted in
        object_positions. An object in `repeated` (found in several tasks of the map) is serialized once:
        a large payload becomes a hidden object (its id noted in `hidden`), a small one is reused as is."""
        serialize = self._serializer.serialize
        payloads = []
        position = offset
        try:
            for position, argument in enumerate(arguments, offset):
                if type(argument) is ObjectReference:
                    payloads.append(argument.object_id)
                    object_positions.append(position)
                elif repeated and id(argument) in repeated:
                    known = repeated[id(argument)]
                    if known is None:
                        payload = serialize(argument)
                        if len(payload) >= m.LARGE_PAYLOAD_BYTES:
                            known = ObjectReference(name="", object_id=random_object_id(), size=len(payload))
                            self._connection.send_object(
                                m.ObjectPayload(object_id=known.object_id, payload=payload, name="shared argument")
                            )
                            hidden.append(known.object_id)
                        else:
                            known = payload
                        repeated[id(argument)] = known
                    if type(known) is ObjectReference:
                        payloads.append(known.object_id)
                        object_positions.append(position)
                    else:
                        payloads.append(known)
                else:
                    payloads.append(serialize(argument))
        except ScalerError:
            raise
        except Exception as error:
            raise _Unserializable(position - offset) from error
        return payloads

    def map(self, fn: Callable[..., Any], iterable: Iterable[tuple], *, progress: bool = False) -> list[Any]:
        """Run `fn(*args)` for every tuple of arguments; returns the results in order.

        The function is serialized once for the whole call, and so is an argument object found in
        several tuples (the same object, `is`): sent once if large, and deleted when the map is over.
        If any call raises, the rest are canceled and the first failure (in argument order, among
        those seen) is raised. A tuple `fn` cannot take is a TypeError, an argument that cannot be
        serialized a SerializationError, both naming the tuple, raised here.
        """
        self._connection.check_open()
        if not callable(fn):
            raise TypeError(f"map() needs a callable as its first argument, got {type(fn).__name__}")
        shape = self._call_shape(fn)
        function_id = self._function_id(fn)
        argument_tuples = list(iterable)
        # Holding argument_tuples keeps every argument alive, so an id names one object for the whole call.
        repeated = repeated_argument_ids(argument_tuples) if len(argument_tuples) > 1 else {}
        hidden: list[bytes] = []
        collector = MapCollector(len(argument_tuples))
        try:
            all_task_ids = self._submit_map(fn, shape, function_id, argument_tuples, collector, repeated, hidden)
            with waiting_for_tasks():
                if progress:
                    total = len(argument_tuples)
                    wait_with_progress(collector.finished, total, lambda: total - collector.remaining, "map")
                else:
                    collector.finished.wait()
            if collector.errors:
                self._connection.forget(all_task_ids)
                self._connection.cancel_tasks(all_task_ids)
            if collector.warnings:
                issue_task_warnings(list(collector.warnings))
            if collector.errors:
                raise collector.errors[min(collector.errors)]
        finally:
            if hidden and self._connection.is_open:
                # After the cancel: the scheduler keeps an object a still-running task names (until clear()).
                self._connection.send_message(m.DeleteObjects(object_ids=hidden))
        deserialize = self._serializer.deserialize
        return [deserialize(payload) for payload in collector.payloads]

    def _submit_map(
        self, fn: Callable[..., Any], shape: CallShape | None, function_id: bytes, argument_tuples: list[tuple],
        collector: MapCollector, repeated: dict[int, Any], hidden: list[bytes],
    ) -> list[int]:
        connection = self._connection
        all_task_ids: list[int] = []
        try:
            self._submit_map_chunks(fn, shape, function_id, argument_tuples, collector, repeated, hidden, all_task_ids)
        except BaseException:
            # A bad argument further on (too large, not a tuple): the tasks already queued are not wanted.
            connection.forget(all_task_ids)
            connection.cancel_tasks(all_task_ids)
            raise
        return all_task_ids

    def _submit_map_chunks(
        self, fn: Callable[..., Any], shape: CallShape | None, function_id: bytes, argument_tuples: list[tuple],
        collector: MapCollector, repeated: dict[int, Any], hidden: list[bytes], all_task_ids: list[int],
    ) -> None:
        connection = self._connection
        depth = client_nesting_depth()
        start = 0
        while start < len(argument_tuples):
            chunk_args: list[bytes] = []
            object_positions: list[int] = []
            width = -1
            end = start
            while end < len(argument_tuples) and end - start < _MAP_CHUNK:
                arguments = argument_tuples[end]
                if not isinstance(arguments, (tuple, list)):
                    raise TypeError(
                        f"map() takes an iterable of argument tuples such as [(1,), (2,)]; "
                        f"item {end} is a {type(arguments).__name__}"
                    )
                if width == -1:
                    width = len(arguments)
                    # Every tuple of a chunk has its first one's width: one check per chunk covers them all.
                    if shape is not None and not shape.fits(width):
                        problem = shape.problem(arguments, {})
                        if problem is not None:
                            raise TypeError(f"map(): argument tuple {end} does not fit {problem}")
                elif len(arguments) != width:
                    break  # a new group starts with the new number of arguments
                try:
                    chunk_args.extend(
                        self._serialize_arguments(arguments, object_positions, len(chunk_args), repeated, hidden)
                    )
                except _Unserializable as failure:
                    raise _serialization_error(
                        f"argument {failure.position} of argument tuple {end} of map({_function_name(fn)})",
                        failure.__cause__,
                    ) from failure.__cause__
                end += 1
            task_ids = [connection.next_task_id() for _ in range(end - start)]
            signature = self._signature(function_id, width, (), depth, self._profiling)
            connection.submit_tasks(signature, task_ids, chunk_args, collector, start, object_positions)
            all_task_ids.extend(task_ids)
            start = end

    def get(
        self, graph: dict, keys: Any, block: bool = True, *, progress: bool = False, order: Order = None
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
        """
        self._connection.check_open()
        requested = list(keys) if isinstance(keys, (list, set)) else [keys]
        plan = plan_graph(graph, requested, order=order)
        futures = self._submit_graph(plan.calls, set(plan.targets.values()))
        outcome: dict[Hashable, Any] = {}
        for key in requested:
            if key in plan.literals:
                literal: concurrent.futures.Future = concurrent.futures.Future()
                literal.set_result(plan.literals[key])
                outcome[key] = literal
            else:
                outcome[key] = futures[plan.targets[key]]
        if not block:
            return outcome
        with waiting_for_tasks():
            if progress:
                _wait_for_futures_with_progress(list(outcome.values()))
            return {key: future.result() for key, future in outcome.items()}

    def _submit_graph(self, calls: list[PlannedCall], wanted: set[Hashable]) -> dict[Hashable, ScalerFuture]:
        """Send planned calls as one submission; returns a future per wanted task key."""
        hidden: list[bytes] = []
        try:
            return self._send_graph(calls, wanted, hidden)
        except BaseException:
            # Refused before anything was submitted (an argument too large): the objects sent for it go too.
            if hidden and self._connection.is_open:
                self._connection.send_message(m.DeleteObjects(object_ids=hidden))
            raise

    def _send_graph(
        self, calls: list[PlannedCall], wanted: set[Hashable], hidden: list[bytes]
    ) -> dict[Hashable, ScalerFuture]:
        connection = self._connection
        serialize = self._serializer.serialize
        task_ids = {call.key: connection.next_task_id() for call in calls}
        depth = client_nesting_depth()
        groups: list[m.TaskGroup] = []
        current_signature: TaskSignature | None = None
        group: m.TaskGroup | None = None
        quiet: list[int] = []
        futures: dict[int, ScalerFuture] = {}
        by_key: dict[Hashable, ScalerFuture] = {}
        # The caller's graph holds every argument until this returns, so an id names one object meanwhile.
        repeated = repeated_argument_ids([call.arguments for call in calls]) if len(calls) > 1 else {}
        for call in calls:
            function = call.function
            if isinstance(function, TemplateCall):
                function = self._template_call(function)
                # The template holds the task's own arguments, one per parameter of the user's function.
                self._check_graph_call(call.key, function.function, call.arguments[0])
            try:
                function_id = self._function_id(function)
            except SerializationError as error:
                raise SerializationError(f"the task at key {call.key!r}: {error}") from error.__cause__
            signature = self._signature(function_id, len(call.arguments), (), depth, self._profiling)
            if signature is not current_signature:
                # The calls of a group share a function and a width: checking the first checks them all.
                if not isinstance(function, TemplateCall):
                    self._check_graph_call(call.key, function, call.arguments)
                current_signature = signature
                group = signature.new_group()
                groups.append(group)
            assert group is not None
            task_id = task_ids[call.key]
            base = len(group.args)
            group.task_ids.append(task_id)
            slots = call.reference_slots
            position = 0
            try:
                for position, argument in enumerate(call.arguments):
                    if position in slots:
                        group.ref_arg_indices.append(base + position)
                        group.ref_task_ids.append(task_ids[slots[position]])
                        group.args.append(b"")
                    elif type(argument) is ObjectReference:
                        group.object_arg_indices.append(base + position)
                        group.args.append(argument.object_id)
                    elif repeated and id(argument) in repeated:
                        object_positions: list[int] = []
                        group.args.extend(
                            self._serialize_arguments((argument,), object_positions, 0, repeated, hidden)
                        )
                        if object_positions:
                            group.object_arg_indices.append(base + position)
                    else:
                        group.args.append(serialize(argument))
            except ScalerError:
                raise
            except Exception as error:
                cause = error.__cause__ if isinstance(error, _Unserializable) else error
                # A wrapped call's single argument is its template, which holds all of the task's arguments.
                what = "an argument" if isinstance(function, TemplateCall) else f"argument {position}"
                raise _serialization_error(f"{what} of the task at key {call.key!r}", cause) from cause
            if call.key in wanted:
                future = ScalerFuture(task_id, connection, self._serializer)
                futures[task_id] = future
                by_key[call.key] = future
            else:
                quiet.append(task_id)
        connection.submit_graph(m.TaskSubmission(objects=[], groups=groups, quiet_task_ids=quiet), futures)
        if hidden:
            _delete_when_all_done(list(futures.values()), hidden, connection)
        return by_key

    def _signature(
        self, function_id: bytes, width: int, keywords: tuple[str, ...], depth: int, profiling: bool
    ) -> TaskSignature:
        """One TaskSignature object per distinct signature, so that grouping compares identities."""
        key = (function_id, width, keywords, depth, profiling)
        signature = self._signatures.get(key)
        if signature is None:
            if len(self._signatures) >= _FUNCTION_CACHE_SIZE:
                self._signatures.clear()
            signature = self._signatures[key] = TaskSignature(
                function_id=function_id, args_per_task=width, keywords=keywords, serializer_id=self._serializer_id,
                nesting_depth=depth, profiling=profiling,
            )
        return signature

    def _template_call(self, wrapper: TemplateCall) -> TemplateCall:
        """One wrapper per user function, so it is serialized and sent once like the function itself."""
        cached = self._template_calls.get(id(wrapper.function))
        if cached is None or cached.function is not wrapper.function:
            if len(self._template_calls) >= _FUNCTION_CACHE_SIZE:
                self._template_calls.clear()
            cached = self._template_calls[id(wrapper.function)] = wrapper
        return cached

    def _serializer_object(self) -> None:
        """A custom serializer travels once, before the first payload it made."""
        if self._serializer_id and self._serializer_id not in self._sent_object_ids:
            self._connection.send_object(m.ObjectPayload(
                object_id=self._serializer_id, payload=cloudpickle.dumps(self._serializer), name="serializer"
            ))
            self._sent_object_ids.add(self._serializer_id)

    def _call_shape(self, fn: Callable[..., Any]) -> CallShape | None:
        """The signature bounds of a function, worked out once per function object (see call_check.py)."""
        cached = self._call_shapes.get(id(fn))
        if cached is not None and cached[0] is fn:
            return cached[1]
        shape = call_shape(fn)
        if len(self._call_shapes) >= _FUNCTION_CACHE_SIZE:
            self._call_shapes.clear()
        self._call_shapes[id(fn)] = (fn, shape)
        return shape

    def _check_graph_call(self, key: Hashable, fn: Callable[..., Any], arguments: Sequence[Any]) -> None:
        shape = self._call_shape(fn)
        if shape is not None and not shape.fits(len(arguments)):
            problem = shape.problem(arguments, {})
            if problem is not None:
                raise TypeError(f"the task at key {key!r} does not fit {problem}")

    def _function_id(self, fn: Callable[..., Any]) -> bytes:
        """Serialize a function once per call site and send it once; identity decides sameness."""
        key = id(fn)
        with self._lock:
            cached = self._function_ids.get(key)
            if cached is not None and cached[0] is fn:
                self._function_ids.move_to_end(key)
                return cached[1]
        try:
            payload = self._serializer.serialize(fn)
        except Exception as error:
            raise _serialization_error(f"the function {_function_name(fn)}", error) from error
        self._connection.check_payload(payload, f"function {getattr(fn, '__qualname__', '')!r}")
        function_id = content_object_id(payload)
        with self._lock:
            self._function_ids[key] = (fn, function_id)
            if len(self._function_ids) > _FUNCTION_CACHE_SIZE:
                self._function_ids.popitem(last=False)
            self._serializer_object()
            if function_id not in self._sent_object_ids:
                name = getattr(fn, "__qualname__", "") or type(fn).__name__
                self._connection.send_object(m.ObjectPayload(object_id=function_id, payload=payload, name=name))
                self._sent_object_ids.add(function_id)
        return function_id

    # ------------------------------------------------------------------------------------------ session

    def clear(self) -> None:
        """Cancel every unfinished task of this client and drop its objects; the client stays usable."""
        self._connection.request(m.ClearRequest(), m.ClearResponse, self._timeout_seconds)
        with self._lock:
            self._sent_object_ids.clear()
            self._function_ids.clear()
        self._shared_arguments.forget_all()
        self._connection._cancel_everything_pending()

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


class _Unserializable(Exception):
    """An argument loop could not serialize the argument at `position` (the original error is the cause);
    its caller, which knows whose arguments they are, raises the SerializationError the user sees."""

    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position


def _serialization_error(what: str, error: BaseException | None) -> SerializationError:
    reason = f"{type(error).__name__}: {error}" if error is not None else "unknown error"
    return SerializationError(f"cannot serialize {what}: {reason}")


def _function_name(fn: Callable[..., Any]) -> str:
    if isinstance(fn, TemplateCall):
        return fn.name
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _delete_when_all_done(futures: list[ScalerFuture], object_ids: list[bytes], connection: ClientConnection) -> None:
    """The hidden objects of a graph go once every wanted task is done (and so every task they needed,
    unless one failed first: the scheduler then keeps the objects still-running tasks name until clear())."""
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_: concurrent.futures.Future) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last and connection.is_open:
            connection.send_message(m.DeleteObjects(object_ids=object_ids))

    for future in futures:
        future.add_done_callback(one_done)


def _wait_for_futures_with_progress(futures: list[concurrent.futures.Future]) -> None:
    """Wait for every future while a bar counts them; done-callbacks run on the client's I/O thread."""
    done = threading.Event()
    finished = [0]
    lock = threading.Lock()

    def count(_: concurrent.futures.Future) -> None:
        with lock:
            finished[0] += 1
            if finished[0] == len(futures):
                done.set()

    if not futures:
        done.set()
    for future in futures:
        future.add_done_callback(count)
    wait_with_progress(done, len(futures), lambda: finished[0], "get")


# Clients rebuilt from a pickle, one per scheduler and settings in this process: every task on a worker
# that receives "the client" shares one connection instead of opening its own.
_unpickled_clients: dict[tuple, Client] = {}
_unpickled_clients_lock = threading.Lock()


def _reconnect(
    address: str, serializer: Serializer, timeout_seconds: float, heartbeat_interval_seconds: float,
    profiling: bool = False,
) -> Client:
    key = (address, type(serializer).__module__, type(serializer).__qualname__, timeout_seconds,
           heartbeat_interval_seconds, profiling)
    with _unpickled_clients_lock:
        client = _unpickled_clients.get(key)
        if client is None or not client._connection.is_open:
            client = _unpickled_clients[key] = Client(
                address=address,
                serializer=serializer,
                timeout_seconds=timeout_seconds,
                heartbeat_interval_seconds=heartbeat_interval_seconds,
                profiling=profiling,
            )
        return client
