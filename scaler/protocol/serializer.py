"""How functions, arguments and results become bytes: the payloads the protocol carries opaque.

A `Serializer` is called once for the function of a call site, once for every argument of every task
(except a large argument shared by several tasks: once for all of them, see
scaler/client/shared_arguments.py), and once for every result. The worker receives the client's
serializer itself (pickled with cloudpickle, once) and uses it for the arguments and the result. It
lives here, below both, because the client and the worker's processor both use it.
"""

from __future__ import annotations

import abc
import pickle
from typing import Any

import cloudpickle

# Values of these exact types pickle the same with the standard library as with cloudpickle, and the
# standard library is about ten times faster on them: the fast path for the many tiny arguments of a map.
_PLAIN_TYPES = frozenset({int, float, str, bytes, bool, type(None), complex})


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
    """cloudpickle, so that lambdas and functions defined in `__main__` travel by value."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        if type(obj) in _PLAIN_TYPES:
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        return pickle.loads(payload)


class StoredBuffer:
    """A payload in the stored-payload layout (scaler/protocol/stored_payload.py): a result fetched from a
    store, mapped or received. `loads` reads it as such; it keeps its mapping alive while it lives."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer


def loads(serializer: Serializer, payload: bytes | memoryview | StoredBuffer) -> Any:
    """Deserialize a payload that may be a zero-copy view of a received frame, or a stored payload.

    The default serializer reads views directly; a custom one is promised bytes, so it gets a copy.
    """
    if type(payload) is StoredBuffer:
        from scaler.protocol import stored_payload  # it imports this module

        return stored_payload.read(payload.buffer, serializer)
    if type(payload) is memoryview and type(serializer) is not DefaultSerializer:
        payload = bytes(payload)
    return serializer.deserialize(payload)  # type: ignore[arg-type]
