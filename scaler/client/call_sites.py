"""What a client remembers per function it calls: a function is serialized and sent once, not once per task.

Sameness is identity: the function object submitted again (a call site in a loop) is found by `id` and
checked with `is`. Each table is bounded; a full one starts over, costing one serialization per function.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Hashable, Sequence

import cloudpickle

from scaler.client.arguments import function_name, serialization_error
from scaler.client.call_check import CallShape, call_shape
from scaler.client.connection import ClientConnection
from scaler.client.graph import TemplateCall
from scaler.native_tasks import NativeFunction
from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer, Serializer
from scaler.protocol.task_signature import TaskSignature
from scaler.utility.identifiers import content_object_id
from scaler.utility.tags import NATIVE_TAG, NO_TAGS, PYTHON_TAG, Tags

# Functions (and signatures, shapes, graph wrappers) remembered.
_CACHE_SIZE = 1024


class CallSites:
    def __init__(
        self, connection: ClientConnection, serializer: Serializer, wait_for_tags_ms: int = 0,
        stream_output: bool = False,
    ) -> None:
        self._connection = connection
        # TaskGroup.streamOutput of every task this client sends (Client(stream_output=...)).
        self._stream_output = stream_output
        # TaskGroup.waitForTagsMs of every tagged task this client sends.
        self._wait_for_tags_ms = wait_for_tags_ms
        self._serializer = serializer
        # The object holding a custom serializer, sent once before the first payload it made; b"": the default.
        self._serializer_payload = b"" if type(serializer) is DefaultSerializer else cloudpickle.dumps(serializer)
        self.serializer_id = content_object_id(self._serializer_payload) if self._serializer_payload else b""
        self._sent_object_ids: set[bytes] = set()
        self._function_ids: collections.OrderedDict[int, tuple[Callable, bytes]] = collections.OrderedDict()
        # Kept apart from _function_ids: checked before anything is serialized, and not dropped by forget_sent().
        self._call_shapes: dict[int, tuple[Callable, CallShape | None]] = {}
        self._template_calls: dict[int, TemplateCall] = {}
        self._signatures: dict[tuple, TaskSignature] = {}
        # Functions that are native stand-ins (scaler.native): their tasks require "native", all others "python".
        self._native_function_ids: set[bytes] = set()
        self._lock = threading.Lock()

    def function_id(self, fn: Callable[..., Any]) -> bytes:
        """The object id of `fn`, serialized and queued to the scheduler on its first call here."""
        key = id(fn)
        with self._lock:
            cached = self._function_ids.get(key)
            if cached is not None and cached[0] is fn:
                self._function_ids.move_to_end(key)
                return cached[1]
        try:
            payload = self._serializer.serialize(fn)
        except Exception as error:
            raise serialization_error(f"the function {function_name(fn)}", error) from error
        self._connection.limits.check_payload(payload, f"function {getattr(fn, '__qualname__', '')!r}")
        function_id = content_object_id(payload)
        with self._lock:
            if isinstance(fn, NativeFunction):
                self._native_function_ids.add(function_id)
            self._function_ids[key] = (fn, function_id)
            if len(self._function_ids) > _CACHE_SIZE:
                self._function_ids.popitem(last=False)
            self._send_serializer_once()
            if function_id not in self._sent_object_ids:
                name = getattr(fn, "__qualname__", "") or type(fn).__name__
                self._connection.send_object(
                    m.ObjectPayload(object_id=function_id, payload=payload, name=name), may_store=False
                )
                self._sent_object_ids.add(function_id)
        return function_id

    def send_serializer(self) -> None:
        """A custom serializer travels once, before the first payload it made."""
        with self._lock:
            self._send_serializer_once()

    def _send_serializer_once(self) -> None:
        if self.serializer_id and self.serializer_id not in self._sent_object_ids:
            self._connection.send_object(m.ObjectPayload(
                object_id=self.serializer_id, payload=self._serializer_payload, name="serializer"
            ), may_store=False)
            self._sent_object_ids.add(self.serializer_id)

    def forget_sent(self) -> None:
        """After clear(): the scheduler dropped every object, functions included."""
        with self._lock:
            self._sent_object_ids.clear()
            self._function_ids.clear()

    def signature(
        self, function_id: bytes, width: int, keywords: tuple[str, ...], depth: int, profiling: bool,
        tags: Tags = NO_TAGS, priority: int = 0, keep: bool = False, keep_in_stores: bool = False,
    ) -> TaskSignature:
        """One TaskSignature object per distinct signature, so that grouping compares identities.

        `tags` are the caller's, sorted and without repeats (scaler.utility.tags.checked_tags); the tasks also
        require the tag of the workers that can run their function at all: "native" for a native stand-in
        (scaler.native), "python" for any other function. So a mixed cluster needs no tags from its users."""
        key = (function_id, width, keywords, depth, profiling, tags, priority, keep, keep_in_stores)
        signature = self._signatures.get(key)
        if signature is None:
            runs_on = NATIVE_TAG if function_id in self._native_function_ids else PYTHON_TAG
            tags = tags if runs_on in tags else tuple(sorted((runs_on, *tags)))
            if len(self._signatures) >= _CACHE_SIZE:
                self._signatures.clear()
            signature = self._signatures[key] = TaskSignature(
                function_id=function_id, args_per_task=width, keywords=keywords, serializer_id=self.serializer_id,
                nesting_depth=depth, profiling=profiling, required_tags=tags,
                wait_for_tags_ms=self._wait_for_tags_ms if tags else 0, priority=priority, keep_results=keep,
                stream_output=self._stream_output, keep_in_stores=keep_in_stores,
            )
        return signature

    def call_shape(self, fn: Callable[..., Any]) -> CallShape | None:
        """The signature bounds of a function, worked out once per function object (see call_check.py)."""
        cached = self._call_shapes.get(id(fn))
        if cached is not None and cached[0] is fn:
            return cached[1]
        shape = call_shape(fn)
        if len(self._call_shapes) >= _CACHE_SIZE:
            self._call_shapes.clear()
        self._call_shapes[id(fn)] = (fn, shape)
        return shape

    def check_graph_call(self, key: Hashable, fn: Callable[..., Any], arguments: Sequence[Any]) -> None:
        """TypeError, naming the task's key, when `fn` cannot take these arguments."""
        shape = self.call_shape(fn)
        if shape is not None and not shape.fits(len(arguments)):
            problem = shape.problem(arguments, {})
            if problem is not None:
                raise TypeError(f"the task at key {key!r} does not fit {problem}")

    def template_call(self, wrapper: TemplateCall) -> TemplateCall:
        """One wrapper per user function, so it is serialized and sent once like the function itself."""
        cached = self._template_calls.get(id(wrapper.function))
        if cached is None or cached.function is not wrapper.function:
            if len(self._template_calls) >= _CACHE_SIZE:
                self._template_calls.clear()
            cached = self._template_calls[id(wrapper.function)] = wrapper
        return cached
