"""Large arguments shared by many tasks travel once, as hidden objects.

Sameness is identity (`is`), never equality or content: hashing a 5 GB argument to find out it was sent
before would cost what sending it again saves. Identity is only safe while the object cannot change:

- Within one `Client.map` call or one `Client.get` graph every argument is serialized before the call
  returns, so an object that appears in several tasks (any type) is serialized once; when its payload
  is large it is sent once, as an object the workers cache, and deleted when the tasks are over.
- Across `Client.submit` calls the user may change a list or an array between two calls and must see
  the new value, so only values that cannot change are shared: `bytes` and `str` of
  `LARGE_PAYLOAD_BYTES` or more. Such a value is sent once while any task using it is unfinished and
  deleted when the last one finishes.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Iterable

from scaler.protocol import messages as m
from scaler.protocol.messages import LARGE_PAYLOAD_BYTES
from scaler.utility.identifiers import random_object_id

# Arguments of these types are never large: no identity is tracked for them.
NEVER_LARGE_TYPES = frozenset({int, float, bool, complex, type(None)})
# Immutable, so identity across submit calls means the same value; `len` bounds their payload from below.
IMMUTABLE_SIZED_TYPES = frozenset({bytes, str})


def repeated_argument_ids(argument_tuples: Iterable[Any]) -> dict[int, Any]:
    """id -> None for every argument object of a map found in more than one place (the caller holds them)."""
    counts: dict[int, int] = {}
    never_large = NEVER_LARGE_TYPES
    immutable_sized = IMMUTABLE_SIZED_TYPES
    for arguments in argument_tuples:
        if not isinstance(arguments, (tuple, list)):
            continue  # map reports it where it serializes
        for argument in arguments:
            kind = type(argument)
            if kind in never_large or (kind in immutable_sized and len(argument) < LARGE_PAYLOAD_BYTES):
                continue
            key = id(argument)
            counts[key] = counts.get(key, 0) + 1
    return {key: None for key, count in counts.items() if count > 1}


@dataclasses.dataclass(slots=True)
class SharedArgument:
    value: Any  # a strong reference: while it lives, no other object can take its id
    object_id: bytes
    unfinished_tasks: int


class SharedArguments:
    """The large immutable arguments of submit calls that are on the cluster now, each with its task count.

    `claim` runs on the submitting thread; `release` on whichever thread completes a future (mostly the
    client's I/O thread). Both only touch the table under the lock and hand messages to the outbox, which
    the I/O thread sends in order: an object always goes out before the first task naming it.
    """

    def __init__(self, send_object: Callable[[m.ObjectPayload], None], send_message: Callable[[m.Message], None]):
        self._send_object = send_object
        self._send_message = send_message
        self._by_id: dict[int, SharedArgument] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_id)

    def claim(self, value: Any, serialize: Callable[[Any], bytes]) -> SharedArgument:
        """The object standing for `value` in one more task; serializes and sends it if it is not out."""
        key = id(value)
        with self._lock:
            entry = self._by_id.get(key)
            if entry is not None and entry.value is value:
                entry.unfinished_tasks += 1
                return entry
        payload = serialize(value)
        with self._lock:
            entry = self._by_id.get(key)
            if entry is not None and entry.value is value:  # another thread sent it meanwhile
                entry.unfinished_tasks += 1
                return entry
            entry = SharedArgument(value, random_object_id(), 1)
            # Under the lock: a task of another thread that finds this entry is queued after its object.
            # Sent before it is kept, so an object refused for its size is not named by later tasks.
            self._send_object(m.ObjectPayload(object_id=entry.object_id, payload=payload, name="shared argument"))
            self._by_id[key] = entry
            return entry

    def release(self, entries: list[SharedArgument]) -> None:
        """One task naming each of these is finished; delete those no unfinished task names any more."""
        doomed = []
        with self._lock:
            for entry in entries:
                if self._by_id.get(id(entry.value)) is not entry:
                    continue  # cleared meanwhile
                entry.unfinished_tasks -= 1
                if entry.unfinished_tasks == 0:
                    del self._by_id[id(entry.value)]
                    doomed.append(entry.object_id)
            if doomed:
                self._send_message(m.DeleteObjects(object_ids=doomed))

    def forget_all(self) -> None:
        """After clear(): the scheduler dropped every object already."""
        with self._lock:
            self._by_id.clear()
