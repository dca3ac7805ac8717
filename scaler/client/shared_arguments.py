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

`RepeatedArguments` (one map or graph) and `SharedArguments` (submit calls) are the two ArgumentSharing
policies that scaler/client/arguments.py asks, argument by argument.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable

from scaler.protocol import messages as m
from scaler.protocol.messages import LARGE_PAYLOAD_BYTES, SHARED_ARGUMENT_NAME
from scaler.protocol.stored_payload import NEVER_LARGE_TYPES  # arguments of these types are never large
from scaler.utility.identifiers import random_object_id

if TYPE_CHECKING:
    from scaler.client.stored_arguments import StoredArguments

# Immutable, so identity across submit calls means the same value; `len` bounds their payload from below.
IMMUTABLE_SIZED_TYPES = frozenset({bytes, str})


def _repeated_argument_ids(argument_tuples: Iterable[Any]) -> dict[int, Any]:
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


class RepeatedArguments:
    """The argument objects found in several tasks of one map or graph, each serialized once.

    A large payload becomes a hidden object, sent once (its id is added to `hidden`, for the caller to
    delete when the tasks are over); a small one is reused as it is.
    """

    def __init__(
        self, argument_tuples: list, send_object: Callable[[m.ObjectPayload], None],
        storing: StoredArguments | None = None,
    ) -> None:
        # The caller holds every argument until the tasks are queued, so an id names one object meanwhile.
        self._known = _repeated_argument_ids(argument_tuples) if len(argument_tuples) > 1 else {}
        self._send_object = send_object
        # With a home store, a large one goes there (its buffers out-of-band); the caller deletes what it stored.
        self._storing = storing
        self.hidden: list[bytes] = []

    def __bool__(self) -> bool:
        return bool(self._known)

    def shares(self, argument: Any) -> bool:
        return id(argument) in self._known

    def stand_in(self, argument: Any, serialize: Callable[[Any], bytes]) -> tuple[bytes, bool]:
        known = self._known[id(argument)]
        if known is None:
            if self._storing is not None:
                payload, is_object_id = self._storing.stand_in(argument)
            else:
                payload, is_object_id = serialize(argument), False
            if is_object_id:
                known = (payload, True)
            elif len(payload) >= LARGE_PAYLOAD_BYTES:  # no store, or it failed: sent once, on the control path
                object_id = random_object_id()
                self._send_object(m.ObjectPayload(object_id=object_id, payload=payload, name=SHARED_ARGUMENT_NAME))
                self.hidden.append(object_id)
                known = (object_id, True)
            else:
                known = (payload, False)
            self._known[id(argument)] = known
        return known


@dataclasses.dataclass(slots=True)
class SharedArgument:
    value: Any  # a strong reference: while it lives, no other object can take its id
    object_id: bytes
    unfinished_tasks: int


class SharedArguments:
    """The large immutable arguments of submit calls that are on the cluster now, each with its task count.

    The ArgumentSharing policy of submit: `stand_in` claims on the submitting thread; `release` runs on
    whichever thread completes a future (mostly the client's I/O thread). Both only touch the table
    under the lock and hand messages to the outbox, which the I/O thread sends in order: an object
    always goes out before the first task naming it.
    """

    def __init__(
        self, send_object: Callable[[m.ObjectPayload], None], send_message: Callable[[m.Message], None],
        store: Callable[[bytes, Any], m.ObjectPayload | None] | None = None,
    ):
        self._send_object = send_object
        # Puts an argument into the home store itself (one copy, no serialized bytes in between); None: no store.
        self._store = store
        self._send_message = send_message
        self._by_id: dict[int, SharedArgument] = {}
        self._by_object_id: dict[bytes, SharedArgument] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_id)

    def shares(self, argument: Any) -> bool:
        return type(argument) in IMMUTABLE_SIZED_TYPES and len(argument) >= LARGE_PAYLOAD_BYTES

    def stand_in(self, argument: Any, serialize: Callable[[Any], bytes]) -> tuple[bytes, bool]:
        """The object standing for `argument` in one more task; serializes and sends it if it is not out."""
        key = id(argument)
        with self._lock:
            entry = self._by_id.get(key)
            if entry is not None and entry.value is argument:
                entry.unfinished_tasks += 1
                return entry.object_id, True
        object_id = random_object_id()
        stored = self._store(object_id, argument) if self._store is not None else None
        item = stored if stored is not None else m.ObjectPayload(
            object_id=object_id, payload=serialize(argument), name=SHARED_ARGUMENT_NAME
        )
        with self._lock:
            entry = self._by_id.get(key)
            if entry is not None and entry.value is argument:  # another thread sent it meanwhile
                entry.unfinished_tasks += 1
                return entry.object_id, True
            entry = SharedArgument(argument, object_id, 1)
            # Under the lock: a task of another thread that finds this entry is queued after its object.
            # Sent before it is kept, so an object refused for its size is not named by later tasks.
            self._send_object(item)
            self._by_id[key] = entry
            self._by_object_id[entry.object_id] = entry
            return entry.object_id, True

    def release(self, object_ids: Iterable[bytes]) -> None:
        """One task naming these objects is finished (ids of other objects are passed over); delete those
        no unfinished task names any more."""
        doomed = []
        with self._lock:
            for object_id in object_ids:
                entry = self._by_object_id.get(object_id)
                if entry is None:
                    continue  # an ObjectReference of the user's, or cleared meanwhile
                entry.unfinished_tasks -= 1
                if entry.unfinished_tasks == 0:
                    del self._by_id[id(entry.value)]
                    del self._by_object_id[object_id]
                    doomed.append(object_id)
            if doomed:
                self._send_message(m.DeleteObjects(object_ids=doomed))

    def forget_all(self) -> None:
        """After clear(): the scheduler dropped every object already."""
        with self._lock:
            self._by_id.clear()
            self._by_object_id.clear()
