"""Timeouts as dask takes them: seconds, or a string such as "10 ms" or "2s"; None waits for ever."""

from __future__ import annotations

from typing import Any


def seconds(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, str):
        from dask.utils import parse_timedelta

        return float(parse_timedelta(timeout, default="seconds"))
    return float(timeout)
