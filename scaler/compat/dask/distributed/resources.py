"""dask's `resources={"GPU": 1}` as Scaler worker tags.

A worker started with `scaler_cluster --tags GPU` has the tag "GPU"; a task that asks for the resource
"GPU" (any quantity above 0) runs only on such a worker. Quantities are not counted: such a worker runs as
many of these tasks at once as it has processors (start it with as many processors as it has GPUs).
"""

from __future__ import annotations

from typing import Mapping


def tags_of_resources(resources: Mapping[str, float] | None) -> set[str] | None:
    if not resources:
        return None
    if not isinstance(resources, Mapping):
        raise TypeError(f"resources must be a dict such as {{'GPU': 1}}, got {type(resources).__name__}")
    tags = set()
    for name, amount in resources.items():
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise ValueError(f"resources: the amount of {name!r} must be a number of at least 0, got {amount!r}")
        if amount > 0:
            tags.add(name)
    return tags or None
