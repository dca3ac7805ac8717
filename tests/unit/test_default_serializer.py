"""The default serializer pickles with the standard library where that means what cloudpickle means, and with
cloudpickle where it does not: what a worker unpickles must not depend on which of the two made it."""

from __future__ import annotations

import contextlib
import importlib
import operator
import pickle
import sys
import traceback
import types
import warnings
from pathlib import Path
from typing import Any, Iterator

import cloudpickle
import numpy as np
import pytest

from scaler.protocol import stored_payload
from scaler.protocol.serializer import DefaultSerializer, dumps


@contextlib.contextmanager
def _in_main(name: str, value: Any) -> Iterator[None]:
    main = sys.modules["__main__"]
    setattr(main, name, value)
    try:
        yield
    finally:
        delattr(main, name)


def _add_one(value: int) -> int:
    return value + 1


def test_a_function_of_main_travels_by_value() -> None:
    """The standard pickler would name `__main__.<function>`, which a worker's `__main__` does not hold."""
    function = _copy_as_main_function(_add_one, "scaler_test_add_one")
    with _in_main("scaler_test_add_one", function):
        payload = DefaultSerializer.serialize({"call": function, "args": [1, 2]})
    assert not hasattr(sys.modules["__main__"], "scaler_test_add_one")
    restored = pickle.loads(payload)
    assert restored["call"](41) == 42


def _make_warner() -> Any:
    def warn_and_fail() -> None:
        inner = [warnings.warn("careful", stacklevel=1) for _ in range(1)]  # nested code: the comprehension's
        raise ValueError(f"failed after {len(inner)}")

    return warn_and_fail


def test_a_function_sent_by_value_keeps_its_file_for_tracebacks_and_warnings() -> None:
    """cloudpickle >= 3.1.3 would name it "<dynamic-code>": a worker's traceback would lose the user's lines."""
    function = _make_warner()  # a nested function: the standard pickler refuses it, cloudpickle sends it by value
    restored = pickle.loads(DefaultSerializer.serialize(function))
    assert restored is not function and restored.__code__.co_filename == __file__
    nested = [const for const in restored.__code__.co_consts if isinstance(const, types.CodeType)]
    assert all(code.co_filename == __file__ for code in nested)
    with pytest.raises(ValueError) as caught, warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        restored()
    assert [warning.filename for warning in caught_warnings] == [__file__]
    printed = "".join(traceback.format_exception(caught.value))
    assert f'File "{__file__}"' in printed and 'raise ValueError(f"failed after' in printed


def test_an_instance_of_a_main_class_travels_with_its_class() -> None:
    point_class = type("ScalerTestPoint", (), {"__module__": "__main__", "norm": lambda self: self.x * 2})
    buffers: list[pickle.PickleBuffer] = []
    with _in_main("ScalerTestPoint", point_class):
        point = point_class()
        point.x = 21
        payload = dumps([point, np.arange(10_000)], buffer_callback=buffers.append)
    restored_point, restored_array = pickle.loads(payload, buffers=buffers)
    assert restored_point.norm() == 42
    assert len(buffers) == 1 and restored_array.sum() == np.arange(10_000).sum()


def test_what_only_cloudpickle_pickles_still_pickles() -> None:
    offset = 40
    payload = DefaultSerializer.serialize((lambda value: value + offset, [np.arange(3)]))
    function, (array,) = pickle.loads(payload)
    assert function(2) == 42
    assert array.tolist() == [0, 1, 2]


def test_a_module_registered_by_value_travels_by_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "scaler_test_by_value.py").write_text("def triple(value):\n    return value * 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("scaler_test_by_value")
    cloudpickle.register_pickle_by_value(module)
    try:
        payload = DefaultSerializer.serialize(module.triple)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules["scaler_test_by_value"]
    (tmp_path / "scaler_test_by_value.py").unlink()  # a worker that cannot import it
    assert pickle.loads(payload)(14) == 42


def test_importable_functions_and_arrays_round_trip_with_buffers_out_of_band() -> None:
    array = np.arange(100_000, dtype=np.float64)
    prepared = stored_payload.prepare_if_large({"f": operator.neg, "a": array}, None, 1024)
    assert isinstance(prepared, stored_payload.PreparedPayload)
    assert [view.nbytes for view in prepared.buffers] == [array.nbytes]
    restored = pickle.loads(prepared.main, buffers=prepared.buffers)
    assert restored["f"](1) == -1 and np.array_equal(restored["a"], array)


def test_an_unpicklable_object_fails_with_the_reason() -> None:
    import threading

    with pytest.raises(TypeError, match="lock"):
        DefaultSerializer.serialize({"lock": threading.Lock()})


def _copy_as_main_function(function: Any, name: str) -> Any:
    """A function that says it was defined in `__main__` under `name`, as a script's functions do."""
    import types

    copy = types.FunctionType(function.__code__, {}, name)
    copy.__module__ = "__main__"
    copy.__qualname__ = name
    return copy
