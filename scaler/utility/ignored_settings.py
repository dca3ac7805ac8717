"""Settings of Scaler 1.9.x that change nothing here, accepted where 1.9.x scripts and code give them.

The command lines (`scaler_scheduler`, `scaler_cluster`), `SchedulerClusterCombo(...)` and the 1.9.x
keywords of `Cluster(...)` take them and check their values as 1.9.x did, so that old scripts keep
running and a typo still fails; the command lines say once in the log that a given one has no effect.
They go no further: no config carries them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from scaler.utility.setting_rules import BYTES_OR_OFF, POSITIVE_SECONDS

EVENT_LOOPS = ("builtin", "uvloop")


def check_event_loop(event_loop: Any) -> None:
    if event_loop not in EVENT_LOOPS:
        raise ValueError(f"must be one of {EVENT_LOOPS}, got {event_loop!r}")


@dataclasses.dataclass(frozen=True)
class IgnoredSetting:
    name: str  # the Python keyword; the option is the same with dashes
    default: Any
    check: Callable[[Any], Any]  # raises TypeError or ValueError for a value 1.9.x refused
    why: str  # why it has no effect here


EVENT_LOOP = IgnoredSetting("event_loop", "builtin", check_event_loop, "the I/O loop is a zmq poller")
OBJECT_RETENTION_SECONDS = IgnoredSetting(
    "object_retention_seconds", 3600.0, POSITIVE_SECONDS.check,
    "objects are freed when their last owning client clears or leaves",
)
GARBAGE_COLLECT_INTERVAL_SECONDS = IgnoredSetting(
    "garbage_collect_interval_seconds", 30.0, POSITIVE_SECONDS.check, "Python's own collector runs as usual"
)
TRIM_MEMORY_THRESHOLD_BYTES = IgnoredSetting(
    "trim_memory_threshold_bytes", 1024**3, BYTES_OR_OFF.check, "processors do not trim their memory"
)
HARD_PROCESSOR_SUSPEND = IgnoredSetting(
    "hard_processor_suspend", False, lambda value: value, "processors waiting on nested tasks sleep in a wait"
)


def check_ignored_settings(settings: dict[str, Any], known: tuple[IgnoredSetting, ...]) -> None:
    """Raise TypeError or ValueError, naming it, for a value 1.9.x would have refused."""
    for setting in known:
        if setting.name in settings:
            try:
                setting.check(settings[setting.name])
            except (TypeError, ValueError) as error:
                raise type(error)(f"{setting.name} {error}") from None
