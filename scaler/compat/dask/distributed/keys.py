"""Keys of futures, named as dask.distributed names them: `inc-<token>`.

A pure call is named by dask's `tokenize` of the function and its arguments, so the same call made twice
names the same key (and the client reuses the first future); any other gets a fresh unique name.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable


def task_key(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], pure: bool, prefix: str | None = None) -> str:
    from dask.base import tokenize
    from dask.utils import funcname

    name = prefix if prefix is not None else funcname(fn)
    return f"{name}-{tokenize(fn, kwargs, *args) if pure else uuid.uuid4().hex}"


def data_key(value: Any, hashed: bool) -> str:
    from dask.base import tokenize

    return f"{type(value).__name__}-{tokenize(value) if hashed else uuid.uuid4().hex}"
