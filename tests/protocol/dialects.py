"""What the suite's tasks look like to each kind of worker: a function payload, argument and result encoding.

A Python worker is tested in its own dialect, cloudpickled functions and the default (pickle) serializer,
which is what Python clients send it; a native worker, or a worker in any other language, in the neutral
dialect of PROTOCOL.md §16 (msgpack, functions named by an extension value). Both name the same functions
with the same meanings: add, mul, sleep_ms, fail, echo.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any, Protocol

import cloudpickle
import msgpack

from tests.protocol import python_functions

NATIVE_FUNCTION_EXT = 1


def content_id(payload: bytes) -> bytes:
    """A function object's id: BLAKE2b with a 16-byte digest of its payload (PROTOCOL.md §2)."""
    return hashlib.blake2b(payload, digest_size=16).digest()


class Dialect(Protocol):
    name: str

    def function(self, name: str) -> bytes:
        """The payload of the function object for `name`."""

    def encode(self, value: Any) -> bytes: ...

    def decode(self, payload: bytes) -> Any: ...


class PythonDialect:
    name = "python"

    def function(self, name: str) -> bytes:
        if not hasattr(python_functions, name):
            return cloudpickle.dumps(f"no such function {name}")  # unpickles, but is not callable
        return cloudpickle.dumps(getattr(python_functions, name), protocol=pickle.HIGHEST_PROTOCOL)

    def encode(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, payload: bytes) -> Any:
        return pickle.loads(payload)


class NeutralDialect:
    name = "neutral"

    def function(self, name: str) -> bytes:
        return msgpack.packb(msgpack.ExtType(NATIVE_FUNCTION_EXT, name.encode()))

    def encode(self, value: Any) -> bytes:
        return msgpack.packb(value, use_bin_type=True)

    def decode(self, payload: bytes) -> Any:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False)


DIALECTS: dict[str, Dialect] = {"python": PythonDialect(), "neutral": NeutralDialect()}
