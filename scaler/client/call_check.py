"""Whether a function can take the arguments of a call, decided before the call is sent.

A call that cannot bind (an argument missing, one too many, a keyword-only parameter given by
position, an unknown keyword) must fail at `submit`, `map` or `get`, where the mistake was made, as
it does in Scaler 1.9.x, not seconds later at `result()`. `inspect.Signature.bind` costs about 3 us,
too much for every task: the signature is reduced once per function to a `CallShape`, which decides
a call of positional arguments only (every task of a `map` or a graph) by its width, and a call with
keywords by a few set lookups. `bind` runs only to word the error of a call that does not fit. A
callable without an inspectable signature (many builtins) is not checked.

The signature is that of the object actually called: a decorator's wrapper is not looked through to
the function it wraps (`functools.wraps` sets `__wrapped__`, and a wrapper that supplies an argument
itself would otherwise be refused calls that work). A wrapper taking `*args, **kwargs` is not checked.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any, Callable, Mapping, Sequence

_Parameter = inspect.Parameter


@dataclasses.dataclass(frozen=True, slots=True)
class CallShape:
    """What a function's signature allows, reduced to what decides a call."""

    name: str
    signature: inspect.Signature
    positional_names: tuple[str, ...]  # the parameters that take a position, in order
    positional_only: int  # how many of those come first and take no keyword
    fewest_positional: int  # how many of those have no default (they come first)
    most_positional: float  # len(positional_names), or math.inf with *args
    keyword_positions: dict[str, int]  # a positional parameter that may be named -> its position
    keyword_only: frozenset[str]
    required_keyword_only: frozenset[str]
    any_keyword: bool  # **kwargs

    def fits(self, width: int) -> bool:
        """Whether `width` positional arguments and no keyword bind."""
        return not self.required_keyword_only and self.fewest_positional <= width <= self.most_positional

    def fits_call(self, width: int, keywords: Mapping[str, Any]) -> bool:
        """Whether `width` positional arguments and these keywords bind (as `Signature.bind` decides)."""
        if width > self.most_positional:
            return False
        keyword_positions = self.keyword_positions
        for name in keywords:
            position = keyword_positions.get(name)
            if position is not None:
                if position < width:
                    return False  # given by position already
            elif name not in self.keyword_only and not self.any_keyword:
                return False  # unknown, or positional-only
        positional_names = self.positional_names
        for position in range(width, self.fewest_positional):
            if position < self.positional_only or positional_names[position] not in keywords:
                return False  # a required parameter left without a value
        return self.required_keyword_only.issubset(keywords)

    def problem(self, arguments: Sequence[Any], keywords: Mapping[str, Any]) -> str | None:
        """Why the call does not bind, in Python's own words (with the signature), or None if it does."""
        try:
            self.signature.bind(*arguments, **keywords)
        except TypeError as error:
            return f"{self.name}{_without_annotations(self.signature)}: {error}"
        return None


def call_shape(function: Callable[..., Any]) -> CallShape | None:
    """The shape of `function`'s signature, or None when it has none that can be inspected."""
    try:
        signature = inspect.signature(function, follow_wrapped=False)
    except Exception:  # ValueError, TypeError, or whatever a broken __signature__ raises: not checked
        return None
    positional_names: list[str] = []
    positional_only = 0
    fewest = 0
    most: float = 0
    keyword_positions: dict[str, int] = {}
    keyword_only: set[str] = set()
    required_keyword_only: set[str] = set()
    any_keyword = False
    for parameter in signature.parameters.values():
        kind, required = parameter.kind, parameter.default is _Parameter.empty
        if kind is _Parameter.POSITIONAL_ONLY or kind is _Parameter.POSITIONAL_OR_KEYWORD:
            if kind is _Parameter.POSITIONAL_ONLY:
                positional_only += 1
            else:
                keyword_positions[parameter.name] = len(positional_names)
            positional_names.append(parameter.name)
            most += 1
            if required:
                fewest += 1
        elif kind is _Parameter.VAR_POSITIONAL:
            most = math.inf
        elif kind is _Parameter.KEYWORD_ONLY:
            keyword_only.add(parameter.name)
            if required:
                required_keyword_only.add(parameter.name)
        else:
            any_keyword = True
    name = getattr(function, "__qualname__", None) or type(function).__name__
    return CallShape(
        name, signature, tuple(positional_names), positional_only, fewest, most, keyword_positions,
        frozenset(keyword_only), frozenset(required_keyword_only), any_keyword,
    )


def _without_annotations(signature: inspect.Signature) -> inspect.Signature:
    """`f(a, b=1)` reads better in an error message than `f(a: 'int', b: 'int' = 1) -> 'int'`."""
    empty = _Parameter.empty
    parameters = [parameter.replace(annotation=empty) for parameter in signature.parameters.values()]
    return signature.replace(parameters=parameters, return_annotation=empty)
