"""The worker tags a task requires (`tags=` on submit, map, get, the executor and the joblib backend).

A task with tags runs only on a worker whose tags (`scaler_cluster --tags`) include all of them; while no
connected worker has them it waits in the scheduler, and `Client(wait_for_tags_seconds=...)` bounds that
wait. Bad input is a TypeError or ValueError at the call that gave it, never a task that waits forever
for a tag nobody can have.
"""

from __future__ import annotations

from collections.abc import Iterable

# What a worker that runs Python functions (scaler/worker/) says it has, and a native worker (native/worker/).
PYTHON_TAG = "python"
NATIVE_TAG = "native"

# Sorted and without repeats: the form TaskSignature and the scheduler's queues use.
Tags = tuple[str, ...]
NO_TAGS: Tags = ()


def checked_tags(tags: Iterable[str] | None, where: str) -> Tags:
    """`tags` as the sorted tuple a signature holds; TypeError or ValueError, naming `where`, if malformed."""
    if tags is None:
        return NO_TAGS
    if isinstance(tags, (str, bytes)):
        raise TypeError(f"{where}: tags must be a set of strings such as {{'gpu'}}, not the string {tags!r}")
    try:
        values = list(tags)
    except TypeError:
        kind = type(tags).__name__
        raise TypeError(f"{where}: tags must be a set of strings such as {{'gpu'}}, got {kind}") from None
    for tag in values:
        if not isinstance(tag, str):
            raise TypeError(f"{where}: every tag must be a str, got {tag!r} ({type(tag).__name__})")
        if not tag or tag != tag.strip() or "," in tag:
            raise ValueError(f"{where}: a tag must be a non-empty word without commas or outer spaces, got {tag!r}")
    return tuple(sorted(set(values)))


def wait_for_tags_ms(seconds: float | None) -> int:
    """Client(wait_for_tags_seconds=...) as TaskGroup.waitForTagsMs: 0 waits for a capable worker forever."""
    if seconds is None:
        return 0
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < 2**32 / 1000:
        raise ValueError(f"wait_for_tags_seconds must be None (wait forever) or a positive number, got {seconds!r}")
    return max(1, int(seconds * 1000))
