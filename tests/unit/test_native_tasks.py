"""scaler.native_tasks: the neutral encoding as PROTOCOL.md §16 defines it, byte for byte."""

from __future__ import annotations

import pickle

import cloudpickle
import msgpack
import pytest

from scaler.native_tasks import NATIVE_FUNCTION_EXT, PYTHON_OBJECT_EXT, NativeFunction, NeutralSerializer, native


def test_a_native_function_is_an_extension_value_naming_it() -> None:
    assert NeutralSerializer().serialize(native("add")) == bytes.fromhex("c7 03 01 61 64 64")
    spin = msgpack.unpackb(NeutralSerializer().serialize(native("spin")))
    assert spin == msgpack.ExtType(NATIVE_FUNCTION_EXT, b"spin")


def test_neutral_values_are_plain_msgpack() -> None:
    value = {"n": [1, -2, 2**63, 1.5, "text", b"bytes", None, True], 3: {"nested": []}}
    payload = NeutralSerializer().serialize(value)
    assert msgpack.unpackb(payload, raw=False, strict_map_key=False) == value
    assert NeutralSerializer().deserialize(payload) == value
    assert NeutralSerializer().deserialize(NeutralSerializer().serialize((1, 2))) == [1, 2]  # tuples come back lists


def test_a_value_without_a_neutral_form_fails_where_it_is_serialized() -> None:
    with pytest.raises(TypeError, match="set values have no language-neutral form"):
        NeutralSerializer().serialize({1, 2})
    with pytest.raises(TypeError, match="outside the 64-bit range"):
        NeutralSerializer().serialize([2**64])


def test_python_objects_travel_as_pickles_when_allowed() -> None:
    serializer = NeutralSerializer(python_objects=True)
    payload = serializer.serialize({"s": {1, 2}, "big": 2**70, "n": 1})
    raw = msgpack.unpackb(payload, raw=False)
    assert raw["n"] == 1 and raw["s"].code == PYTHON_OBJECT_EXT and raw["big"].code == PYTHON_OBJECT_EXT
    assert serializer.deserialize(payload) == {"s": {1, 2}, "big": 2**70, "n": 1}
    function = serializer.deserialize(serializer.serialize(len))
    assert function is len


def test_the_stand_in() -> None:
    assert native("add") is native("add") and native("add") == NativeFunction("add")
    assert native("add").__qualname__ == "native('add')"
    assert pickle.loads(pickle.dumps(native("mul"))) is native("mul")
    with pytest.raises(TypeError, match="runs on a native worker only"):
        native("add")(1, 2)
    with pytest.raises(TypeError, match="non-empty name"):
        native("")


def test_the_serializer_travels_to_python_workers() -> None:
    """The client sends its serializer cloudpickled (§13); a Python worker rebuilds the same one."""
    for serializer in (NeutralSerializer(), NeutralSerializer(python_objects=True)):
        assert cloudpickle.loads(cloudpickle.dumps(serializer)) == serializer
