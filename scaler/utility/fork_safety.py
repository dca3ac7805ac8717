"""What a forked child must fix in the objects it inherited from its parent.

`os.fork` (and multiprocessing's "fork" start method) copies memory but not threads. A Client's
I/O thread, a joblib backend's callback thread, and the locks they held stay with the parent, while
the child holds copies that look alive: work handed to them waits forever. Objects that own such
threads or sockets register here, and in the child, right after the fork and before anything else
runs, each one's `_after_fork_in_child()` makes it fail at once or start afresh instead.

Those methods run while the child has a single thread, and any lock may be held by a thread the
child does not have: they only set attributes and make new locks, never wait, never run user code.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class InheritedByFork(Protocol):
    def _after_fork_in_child(self) -> None: ...


_registered: weakref.WeakSet[InheritedByFork] = weakref.WeakSet()


def fix_after_fork(owner: InheritedByFork) -> None:
    """Call `owner._after_fork_in_child()` in every process forked while `owner` is alive."""
    _registered.add(owner)


def _tell_inherited_objects() -> None:
    for owner in list(_registered):
        owner._after_fork_in_child()


if hasattr(os, "register_at_fork"):  # not on Windows, which cannot fork
    os.register_at_fork(after_in_child=_tell_inherited_objects)
