"""call_check: the per-function shape that decides whether a call binds agrees with `Signature.bind`. No processes."""

from __future__ import annotations

import functools
import inspect
import operator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.client.call_check import call_shape

pytestmark = pytest.mark.timeout(60)

_KINDS = [
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.VAR_POSITIONAL,
    inspect.Parameter.KEYWORD_ONLY,
    inspect.Parameter.VAR_KEYWORD,
]
_NAMES = ["a", "b", "c", "d", "e"]
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


@st.composite
def signatures(draw: st.DrawFn) -> inspect.Signature:
    """Any valid signature over a few names: kinds in order, defaults only after the required positionals."""
    kinds = sorted(draw(st.lists(st.sampled_from(_KINDS), max_size=5)), key=_KINDS.index)
    kinds = [kind for index, kind in enumerate(kinds) if kind not in kinds[:index] or kind not in _VARIADIC]
    parameters = []
    defaults_started = False
    for name, kind in zip(_NAMES, kinds):
        default: Any = inspect.Parameter.empty
        if kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            if defaults_started or draw(st.booleans()):
                defaults_started = True
                default = 0
        elif kind is inspect.Parameter.KEYWORD_ONLY and draw(st.booleans()):
            default = 0
        parameters.append(inspect.Parameter(name, kind, default=default))
    return inspect.Signature(parameters)


def function_with(signature: inspect.Signature) -> Any:
    namespace: dict = {}
    exec(f"def function{signature}: pass", namespace)
    return namespace["function"]


@settings(max_examples=1000, deadline=None)
@given(signatures(), st.integers(0, 6), st.lists(st.sampled_from([*_NAMES, "z"]), unique=True, max_size=4))
def test_the_shape_decides_every_call_as_python_does(signature: inspect.Signature, width: int, names: list) -> None:
    """Against a real call, the truth on the worker (3.11's `bind` refuses `f(a=0)` for `def f(a=0, /, **b)`)."""
    function = function_with(signature)
    shape = call_shape(function)
    assert shape is not None
    keywords = dict.fromkeys(names, 0)
    try:
        function(*range(width), **keywords)
        calls = True
    except TypeError:
        calls = False
    assert shape.fits_call(width, keywords) == calls
    if not keywords:
        assert shape.fits(width) == calls
    if not calls:
        assert shape.problem(range(width), keywords) is not None  # the error a misfit is reported with


def test_what_is_checked_and_what_is_not() -> None:
    def two(a: int, b: int = 0, *, c: int) -> None: ...

    shape = call_shape(two)
    assert shape is not None
    assert not shape.fits(1) and shape.fits_call(1, {"c": 1}) and not shape.fits_call(1, {"c": 1, "d": 2})
    assert shape.problem((1,), {}) == f"{two.__qualname__}(a, b=0, *, c): missing a required argument: 'c'"
    assert call_shape(operator.neg) is not None and call_shape(operator.neg).fits(1)  # type: ignore[union-attr]
    assert call_shape(functools.partial(two, 1)).fits_call(0, {"c": 1})  # type: ignore[union-attr]
    assert call_shape(max) is None  # no signature to inspect: passed through unchecked
    assert call_shape(dict) is None


def test_a_wrapper_is_checked_as_what_is_called_not_as_what_it_wraps() -> None:
    def scale(factor: int, value: int) -> int:
        return factor * value

    @functools.wraps(scale)
    def doubled(*args: Any, **kwargs: Any) -> int:
        return scale(2, *args, **kwargs)

    shape = call_shape(doubled)
    assert shape is not None and shape.fits(1) and doubled(5) == 10
    assert call_shape(dict) is None
