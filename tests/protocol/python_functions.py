"""The conformance suite's functions for Python workers: the same names and meanings as the native
worker's (PROTOCOL.md §16), imported by reference, since the worker imports this checkout's `tests`."""

from __future__ import annotations

import time
from typing import Any


def add(a: Any, b: Any) -> Any:
    return a + b


def mul(a: Any, b: Any) -> Any:
    return a * b


def sleep_ms(milliseconds: float) -> float:
    time.sleep(milliseconds / 1000)
    return milliseconds


def fail(message: str) -> None:
    raise RuntimeError(message)


def echo(value: Any) -> Any:
    return value
