"""How functions, arguments and results become bytes: the payloads the protocol carries opaque.

A `Serializer` is called once for the function of a call site, once for every argument of every task
(except a large argument shared by several tasks: once for all of them, see
scaler/client/shared_arguments.py), and once for every result. The worker receives the client's
serializer itself (pickled with cloudpickle, once) and uses it for the arguments and the result. It
lives here, below both, because the client and the worker's processor both use it.
"""

from __future__ import annotations

import abc
import io
import pickle
import types
from collections import ChainMap
from typing import TYPE_CHECKING, Any, Callable

import cloudpickle

if TYPE_CHECKING:
    from scaler.protocol.stored_payload import StoredBuffer

# Values of these exact types pickle the same with the standard library as with cloudpickle, and the
# standard library is about ten times faster on them: the fast path for the many tiny arguments of a map.
_PLAIN_TYPES = frozenset({int, float, str, bytes, bool, type(None), complex})
_MAIN_MODULE = b"__main__"


def dumps(obj: Any, buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None) -> bytes:
    """Pickle `obj` (protocol 5) as cloudpickle would, with the standard library's pickler when that means the same.

    cloudpickle calls a Python hook for every object it pickles; the standard pickler does not, and is two to
    three times faster on the nested containers of a dask task (measured on the dask.array benchmark's task
    arguments: 22 ms against 47 ms for one computation's 581). Both pickle importable functions and classes by
    reference; they differ only on what cloudpickle pickles by value: what the standard pickler refuses
    (lambdas, nested functions), what lives in `__main__` (its stream names that module, and a worker's
    `__main__` is not the client's), and modules registered with `cloudpickle.register_pickle_by_value` (a stream
    names each module it refers to, so a registered name found in it is enough to tell). Those are pickled
    again with cloudpickle. Like the standard pickler, this pickles by reference a function of a module that
    has no import spec but sits in `sys.modules`, which cloudpickle would send by value. With `buffer_callback`,
    every buffer goes out-of-band (the callback's answer is not asked).
    """
    buffers: list[pickle.PickleBuffer] | None = [] if buffer_callback is not None else None
    try:
        stream = pickle.dumps(obj, protocol=5, buffer_callback=None if buffers is None else buffers.append)
    except Exception:  # what only cloudpickle pickles; a real failure fails again below, with its own error
        stream = None
    if stream is not None and _MAIN_MODULE not in stream and not _names_a_by_value_module(stream):
        if buffers:
            assert buffer_callback is not None
            for buffer in buffers:
                buffer_callback(buffer)
        return stream
    with io.BytesIO() as file:
        _FileNamingPickler(file, protocol=5, buffer_callback=buffer_callback).dump(obj)
        return file.getvalue()


# How cloudpickle reduces a code object it sends by value. Since 3.1.3 it names the file "<dynamic-code>", for
# deterministic payloads; a worker's tracebacks and warnings then lose the file, and with it the source lines a
# user reads (of a script's `__main__`, a notebook cell, a module registered by value).
_CLOUDPICKLE_CODE_REDUCE = cloudpickle.Pickler.dispatch_table.get(types.CodeType)


class _CodeAsCloudpickleSendsIt:
    """Pickles as cloudpickle's own reduction of `code`, and so loads as the code object itself."""

    __slots__ = ("code",)

    def __init__(self, code: types.CodeType) -> None:
        self.code = code

    def __reduce__(self) -> Any:
        return _CLOUDPICKLE_CODE_REDUCE(self.code)


def _named_code(code: types.CodeType, file_name: str) -> types.CodeType:
    return code if code.co_filename == file_name else code.replace(co_filename=file_name)


def _reduce_code(code: types.CodeType) -> tuple:
    """The code as cloudpickle sends it, given back its file's name when loaded (nested code too: its constants
    are pickled by the same pickler)."""
    return _named_code, (_CodeAsCloudpickleSendsIt(code), code.co_filename)


class _FileNamingPickler(cloudpickle.Pickler):
    """cloudpickle, with each code object sent by value keeping the name of the file it was defined in."""

    if _CLOUDPICKLE_CODE_REDUCE is not None:
        dispatch_table = ChainMap({types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


def _names_a_by_value_module(stream: bytes) -> bool:
    """Whether the stream may refer to a module (or a submodule of a package) registered to travel by value."""
    registered = cloudpickle.list_registry_pickle_by_value()
    return bool(registered) and any(name.encode() in stream for name in registered)


class Serializer(abc.ABC):
    @staticmethod
    @abc.abstractmethod
    def serialize(obj: Any) -> bytes:
        """Turn a function, an argument or a result into bytes."""

    @staticmethod
    @abc.abstractmethod
    def deserialize(payload: bytes) -> Any:
        """Turn bytes made by `serialize` back into the object."""


class DefaultSerializer(Serializer):
    """cloudpickle's meaning (lambdas and functions defined in `__main__` travel by value), at the standard
    library's speed where the two agree (see `dumps`)."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        if type(obj) in _PLAIN_TYPES:
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return dumps(obj)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        return pickle.loads(payload)


def loads(serializer: Serializer, payload: bytes | memoryview | StoredBuffer) -> Any:
    """Deserialize a payload that may be a zero-copy view of a received frame, or a stored payload.

    The default serializer reads views directly; a custom one is promised bytes, so it gets a copy. A stored
    payload (scaler/protocol/stored_payload.py, which imports this module) reads itself.
    """
    payload_type = type(payload)
    if payload_type is memoryview:
        if type(serializer) is not DefaultSerializer:
            payload = bytes(payload)  # type: ignore[arg-type]
    elif payload_type is not bytes:
        load = getattr(payload, "load", None)  # a StoredBuffer; anything else is bytes-like
        if load is not None:
            return load(serializer)
    return serializer.deserialize(payload)  # type: ignore[arg-type]
