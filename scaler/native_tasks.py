"""Language-neutral tasks: call a function a native worker was built with, on language-neutral values.

A native worker (native/worker/, in C++) runs no Python. A task for it names one of its functions and
carries its arguments and result in the neutral encoding of PROTOCOL.md §16: msgpack, with the function
named by a msgpack extension value. `native(name)` is the stand-in a client submits for such a function,
and `NeutralSerializer` writes and reads that encoding:

    with Client(address, serializer=NeutralSerializer()) as client:
        client.submit(native("add"), 1, 2).result()            # 3, computed in C++
        client.map(native("mul"), [(i, i) for i in range(5)])  # [0, 1, 4, 9, 16]

Neutral values are None, bool, int (64-bit), float, str, bytes, lists (tuples arrive as lists) and dicts
of those. A value with no neutral form fails at `submit` with a SerializationError, unless the serializer
was made with `python_objects=True`: it then travels as a pickle inside the neutral encoding, which Python
workers read and native workers refuse with a clear `serialization` failure. That is what lets one graph
hold Python and native nodes (see PROTOCOL.md §16).
"""

from __future__ import annotations

import functools
import pickle
from typing import Any, NoReturn

import cloudpickle
import msgpack

from scaler.protocol.serializer import Serializer

# msgpack extension types of the neutral encoding (PROTOCOL.md §16).
NATIVE_FUNCTION_EXT = 1  # data: the function's name, UTF-8
PYTHON_OBJECT_EXT = 2  # data: a pickle; only Python peers read it


class NativeFunction:
    """Names a function a native worker was built with; submitted like any function, it runs there."""

    def __init__(self, name: str) -> None:
        self.name = name
        # The client names a function's object and its errors by __qualname__.
        self.__qualname__ = f"native({name!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            f"{self.__qualname__} runs on a native worker only: submit it, as in "
            f"client.submit({self.__qualname__}, ...), from a Client made with serializer=NeutralSerializer()"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NativeFunction) and other.name == self.name

    def __hash__(self) -> int:
        return hash((NativeFunction, self.name))

    def __repr__(self) -> str:
        return self.__qualname__

    def __reduce__(self) -> tuple[Any, ...]:
        return native, (self.name,)


@functools.lru_cache(maxsize=1024)
def native(name: str) -> NativeFunction:
    """The native function `name` (e.g. "add"); the same object for the same name, so a client sends it once."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"native() takes the non-empty name of a native function, got {name!r}")
    return NativeFunction(name)


class NeutralSerializer(Serializer):
    """The neutral encoding (msgpack, PROTOCOL.md §16) for functions, arguments and results.

    `python_objects=False` (the default): only neutral values; anything else fails where it is serialized.
    `python_objects=True`: anything else travels as a pickle (extension type 2), for Python workers only.
    """

    def __init__(self, python_objects: bool = False) -> None:
        self.python_objects = python_objects

    def serialize(self, obj: Any) -> bytes:  # type: ignore[override]
        return msgpack.packb(obj, default=self._extension, use_bin_type=True)

    def deserialize(self, payload: bytes) -> Any:  # type: ignore[override]
        return msgpack.unpackb(payload, ext_hook=_read_extension, raw=False, strict_map_key=False)

    def _extension(self, obj: Any) -> msgpack.ExtType:
        if isinstance(obj, NativeFunction):
            return msgpack.ExtType(NATIVE_FUNCTION_EXT, obj.name.encode())
        if self.python_objects:
            return self._python_object(obj)
        if isinstance(obj, int):
            raise TypeError(f"the integer {obj} is outside the 64-bit range of the neutral encoding")
        raise TypeError(
            f"{type(obj).__qualname__} values have no language-neutral form (None, bool, int, float, str, bytes, "
            "list, dict); use NeutralSerializer(python_objects=True) if only Python workers read them"
        )

    @staticmethod
    def _python_object(obj: Any) -> msgpack.ExtType:
        return msgpack.ExtType(PYTHON_OBJECT_EXT, cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    def __eq__(self, other: object) -> bool:
        return type(other) is NeutralSerializer and other.python_objects == self.python_objects

    def __hash__(self) -> int:
        return hash((NeutralSerializer, self.python_objects))

    def __repr__(self) -> str:
        return f"NeutralSerializer(python_objects={self.python_objects})"


def _read_extension(code: int, data: bytes) -> Any:
    if code == NATIVE_FUNCTION_EXT:
        return native(data.decode())
    if code == PYTHON_OBJECT_EXT:
        return pickle.loads(data)
    return msgpack.ExtType(code, data)
