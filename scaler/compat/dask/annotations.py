"""dask's `priority` annotations, as per-key priorities for `Client.get`.

`with dask.annotate(priority=5): ...` marks the layers built inside it. A scheduler's `get` receives an
expression whose `__dask_annotations__()` maps each annotation to `{key: value}`, or a HighLevelGraph whose
layers hold the annotations (a value may be a function of the key, called here as dask does). dask's graph
optimization may drop annotations of layers it fuses: compute with `optimize_graph=False` to keep them all.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from scaler.protocol.sharing import checked_priority


def annotated_priorities(dsk: Any) -> dict[Hashable, int]:
    """`{key: priority}` for the keys dask annotated with a priority; TypeError naming a key whose is no int."""
    raw: Mapping[Hashable, Any]
    annotations = getattr(dsk, "__dask_annotations__", None)
    if callable(annotations):
        raw = annotations().get("priority") or {}
    else:
        raw = {}
        for layer in getattr(dsk, "layers", {}).values():
            value = (getattr(layer, "annotations", None) or {}).get("priority")
            if value is not None:
                raw.update({key: value(key) if callable(value) else value for key in layer})  # type: ignore[dict-item]
    return {key: checked_priority(value, f"dask annotation on key {key!r}") for key, value in raw.items()}


def fused_priorities(
    priorities: dict[Hashable, int], fused: Mapping[Hashable, list[Hashable]]
) -> dict[Hashable, int]:
    """The priorities of the translated graph: a task that runs fused nodes has the highest of theirs."""
    if not priorities or not fused:
        return priorities
    for head, members in fused.items():
        annotated = [priorities[key] for key in members if key in priorities]
        if annotated:
            priorities[head] = max(annotated)
    return priorities
