"""The rules of the two numbers by which clients share a cluster: a client's share and a task's priority.

A client's `share` (Hello.share) weighs it in the fair share of the workers between clients; a task's
`priority` (TaskGroup.priority) orders the ready tasks of one client, higher first. Both are checked
where the user gives them (Client, submit, map, get, the adapters), and the share again by the scheduler,
which refuses a hello that breaks the rule.
"""

from __future__ import annotations

import math
from typing import Any

# Hello.share of a client that sets none.
DEFAULT_SHARE = 1.0
# TaskGroup.priority is an Int32 on the wire.
MIN_PRIORITY = -(2**31)
MAX_PRIORITY = 2**31 - 1


def share_problem(share: float) -> str | None:
    """Why a share (already a number) cannot weigh a client, or None: it must be finite and above 0."""
    if not math.isfinite(share) or share <= 0:
        return f"a client's share must be a finite number above 0, got {share!r}"
    return None


def checked_share(share: Any) -> float:
    """`share` as a float; TypeError if it is not a number (bools are not), ValueError if not finite and > 0."""
    if isinstance(share, bool) or not isinstance(share, (int, float)):
        raise TypeError(f"share must be a number such as 1.0 or 2.0, got {type(share).__name__}")
    share = float(share)
    problem = share_problem(share)
    if problem is not None:
        raise ValueError(problem)
    return share


def checked_priority(priority: Any, where: str) -> int:
    """`priority` as an int; TypeError if it is not an int (bools are not), ValueError outside the Int32 range.

    `where` names the call in the message, e.g. "submit()"."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"{where}: priority must be an int (higher runs first), got {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"{where}: priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}, got {priority}")
    return int(priority)
