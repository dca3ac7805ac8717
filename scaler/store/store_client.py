"""Putting objects into a store and getting them out: what clients, processors and tests call.

On the store's host (same host key) objects go through shared memory: `put` asks for a segment, writes
the payload into it in place and seals it; `get` maps the object's segment privately, so NumPy arrays
come back as views of the mapping, and tells the store when the mapping is gone (its finalizer), so the
store may recycle the segment. A client's StoreClient (`lend=True`) lends a payload made of `bytes`
instead of writing it (lent_objects.py): readers copy it out of the client's memory (borrowed_memory.py),
or, where the kernel does not let them, the store does and sends it; a store that cannot read the
client's memory refuses the first loan, and this client writes segments from then on.

From another host, `put` sends the payload as frames (the object's buffers uncopied) and `get` receives it
as one frame that the arrays then view.

A remote store that this peer cannot reach (no connection to its data address within `probe_seconds`
of the first request: a client behind NAT, a firewalled port) is reached through the scheduler instead,
if the caller gave a relay path (relay_path.py): the request and every later one go there, and the
direct socket is closed. The probe waits for the connection, not for the answer, so a store that is
slow to answer is not mistaken for one out of reach, and a reachable store costs no extra round trip.

One StoreClient talks to one store, from any thread (one request at a time); every wait has a timeout.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import threading
import time
import weakref
from typing import Any, Callable

import zmq

from scaler.protocol import data_messages as d
from scaler.protocol import stored_payload
from scaler.protocol.messages import Buffer
from scaler.protocol.serializer import Serializer
from scaler.store.borrowed_memory import LoanUnreadable, loan_layout, read_parts, read_payload
from scaler.store.kept_mappings import KeptMappings
from scaler.store.lent_objects import LentObjects
from scaler.store.local_read import read_segment
from scaler.store.relay_path import DEFAULT_PROBE_SECONDS, RelayPath
from scaler.store.segment import map_for_reading
from scaler.store.store_address import StoreAddress

logger = logging.getLogger(__name__)

# A store answers a get that waits at the end of its wait; this much later, its silence is an error.
_ANSWER_GRACE_SECONDS = 5.0


class StoreError(RuntimeError):
    """The store refused a request, or answered something that makes no sense."""


class StoreTimeout(StoreError, TimeoutError):
    """The store did not answer in time (it may be gone)."""


class StoreGone(StoreTimeout):
    """The scheduler says the store is not registered with it (any more): gone, as one that does not answer."""


class ObjectMissing(StoreError):
    """The store does not have the object (and could not fetch it in time); `reason` says why."""

    def __init__(self, object_id: bytes, reason: str) -> None:
        super().__init__(f"object {object_id.hex()} is missing: {reason}")
        self.object_id = object_id
        self.reason = reason


def _on_unmapped(releases: collections.deque, object_id: bytes, flush: weakref.WeakMethod) -> None:
    """A reader's mapping is gone: the store may recycle the segment once it hears of it."""
    releases.append(object_id)
    method = flush()
    if method is not None:
        method()


class StoreClient:
    def __init__(
        self, store: StoreAddress, serializer: Serializer | None = None, timeout_seconds: float = 60.0,
        context: zmq.Context | None = None, local: bool | None = None, relay: RelayPath | None = None,
        probe_seconds: float = DEFAULT_PROBE_SECONDS, lend: bool = False,
    ) -> None:
        self.store = store
        self.local = store.is_local() if local is None else local
        if self.local and not store.ipc_address:
            raise ValueError(f"the store at {store.data_address} has no local (ipc) address")
        self._serializer = serializer
        self._timeout = timeout_seconds
        self._own_context = context is None
        self._context = context if context is not None else zmq.Context(io_threads=1)
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, 0)
        self._socket.setsockopt(zmq.RCVHWM, 0)
        # Remote, with a relay path: until the connection is made (the monitor says so), the store may be out
        # of reach. Watched from before the connect, so that the event cannot be missed.
        self._relay = relay if not self.local else None
        self._probe_seconds = probe_seconds
        self._relayed = False
        self._monitor: zmq.Socket | None = None
        if self._relay is not None:
            self._monitor = self._socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self._socket.connect(store.ipc_address if self.local else store.data_address)
        self._lock = threading.Lock()
        self._next_request = 1
        # Requests sent without waiting (seals of results): request id -> object id, until their answer comes.
        self._unawaited: dict[int, bytes] = {}
        self._releases: collections.deque[bytes] = collections.deque()
        self._flush_method = weakref.WeakMethod(self.flush_releases)
        self._pid = os.getpid()
        self._kept_mappings = KeptMappings()  # of the large segments this client wrote (local stores)
        # What this client lent the store, until it lets go of it; None: it never lends (see the module doc).
        self._lent: LentObjects | None = LentObjects() if lend and self.local else None
        self._lending = self._lent is not None
        self._loan_taken = False  # the store took a loan once: later ones need not wait for its answer
        self._closed = False

    # ------------------------------------------------------------------------------------------ writing

    def put(self, object_id: bytes, obj: Any, name: str = "", timeout: float | None = None) -> int:
        """Store `obj` under `object_id`; returns once the store holds it, with its stored size in bytes."""
        return self.put_prepared(object_id, stored_payload.prepare(obj, self._serializer), name, timeout)

    def put_prepared(
        self, object_id: bytes, payload: stored_payload.PreparedPayload, name: str = "", timeout: float | None = None,
        wait: bool = True,
    ) -> int:
        """Store a prepared payload; its stored size in bytes. `wait=False` (local stores): return once the
        payload is written, without waiting for the store's answer to the seal. A reader that asks before the
        seal arrives waits for it; a refused seal is logged when its answer comes (the object is then lost,
        and its readers report it so: lineage.py)."""
        deadline = self._deadline(timeout)
        if self._lending and LentObjects.lendable(payload) and self._lend(object_id, payload, name, deadline, wait):
            return payload.size
        if self.local:
            segment = self._request(lambda rid: d.Allocate(rid, payload.size, self._pid), deadline, d.Segment)
            self._kept_mappings.write(segment.path, payload.pieces())

            def seal(rid: int) -> d.Seal:
                return d.Seal(rid, object_id, segment.path, payload.size, self._pid, name)

            if wait:
                self._request(seal, deadline, d.Stored)
            else:
                self._tell(seal, object_id)
        else:
            pieces = payload.pieces(d.COPIED_FRAME_BYTES)  # the store copies them into a segment
            self._request(lambda rid: d.Put(rid, object_id, pieces, name), deadline, d.Stored)
        return payload.size

    def _lend(self, object_id: bytes, payload: stored_payload.PreparedPayload, name: str, deadline: float,
              wait: bool) -> bool:
        """Lend the payload to the store; False if the store refuses (then this client lends no more)."""
        lent = self._lent
        assert lent is not None
        loan = lent.lend(object_id, payload, self._pid)

        def lend(rid: int) -> d.Lend:
            return d.Lend(rid, object_id, payload.size, loan, name)

        if self._loan_taken and not wait:
            self._tell(lend, object_id)
            return True
        try:
            self._request(lend, deadline, d.Stored)
        except StoreTimeout:
            lent.let_go([object_id])
            raise
        except StoreError as error:
            lent.let_go([object_id])
            self._stop_lending(str(error))
            return False
        self._loan_taken = True
        return True

    def _stop_lending(self, reason: str) -> None:
        if self._lending:
            logger.info(f"store client: objects go into shared memory from now on, not lent: {reason}")
            self._lending = False

    def let_go(self, object_ids: list[bytes]) -> None:
        """These objects are deleted: what this client lent of them may be freed (readers can no longer read it)."""
        if self._lent is not None:
            self._lent.let_go(object_ids)

    def let_go_all(self) -> None:
        if self._lent is not None:
            self._lent.let_go_all()

    # ------------------------------------------------------------------------------------------ reading

    def get(
        self, object_id: bytes, holder: str = "", timeout: float | None = None, serializer: Serializer | None = None
    ) -> Any:
        """The object, from this store; from `holder` (another store's data address) through it if need be.

        Waits up to `timeout` for an object that is being put or fetched, then raises ObjectMissing.
        `serializer` overrides this client's for this object.
        """
        serializer = self._serializer if serializer is None else serializer
        if self.local:
            located = self._locate(object_id, holder, timeout)
            if isinstance(located, d.Borrowed):
                return self._read_borrowed(located, holder, timeout, serializer)
            return read_segment(located.path, located.size, serializer, self._let_go_of(located.object_id))
        return stored_payload.read(self.get_payload(object_id, holder, timeout), serializer)

    def _read_borrowed(
        self, borrowed: d.Borrowed, holder: str, timeout: float | None, serializer: Serializer | None
    ) -> Any:
        """A borrowed object, read out of its lender's memory; by the store, when this process may not."""
        layout = loan_layout(borrowed.loan, borrowed.size)
        try:
            parts = read_parts(borrowed.loan)
        except LoanUnreadable:
            return stored_payload.read(self._get_remote(borrowed.object_id, holder, timeout), serializer)
        return stored_payload.read_parts(layout, parts[0], parts[1:], serializer)

    def get_payload(self, object_id: bytes, holder: str = "", timeout: float | None = None) -> Any:
        """The object's stored payload (stored_payload.py), not read yet: a private mapping of its segment
        (local: pinned in the store until the mapping and every view of it are gone) or the received bytes."""
        if self.local:
            located = self._locate(object_id, holder, timeout)
            if isinstance(located, d.Borrowed):
                try:
                    return read_payload(located.loan, located.size)
                except LoanUnreadable:
                    return self._get_remote(object_id, holder, timeout)
            return self._map(located)
        return self._get_remote(object_id, holder, timeout)

    def _get_remote(self, object_id: bytes, holder: str, timeout: float | None) -> Any:
        """The object's payload, sent by the store (over ipc too: the store reads what this process may not)."""
        wait = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + wait + _ANSWER_GRACE_SECONDS
        answer = self._request(
            lambda rid: d.Get(rid, object_id, local=False, wait_ms=int(wait * 1000), holder=holder),
            deadline, d.ObjectData,
        )
        return answer.payload[0] if len(answer.payload) == 1 else b"".join(answer.payload)

    def _locate(self, object_id: bytes, holder: str, timeout: float | None) -> d.Located | d.Borrowed:
        """Where the object is (local stores): its segment, pinned for this process until let go of; or the
        memory of the process that lent it."""
        wait = self._timeout if timeout is None else timeout
        return self._request(
            lambda rid: d.Get(rid, object_id, local=True, wait_ms=int(wait * 1000), pid=self._pid, holder=holder),
            time.monotonic() + wait + _ANSWER_GRACE_SECONDS, (d.Located, d.Borrowed),
        )

    def _let_go_of(self, object_id: bytes) -> Callable[[], None]:
        """What tells the store (soon) that this process no longer needs the object's segment pinned."""
        return functools.partial(_on_unmapped, self._releases, object_id, self._flush_method)

    def _map(self, located: d.Located) -> Any:
        let_go = self._let_go_of(located.object_id)
        try:
            mapping = map_for_reading(located.path, located.size)
        except OSError:
            let_go()
            raise
        unmapped = weakref.finalize(mapping, let_go)
        unmapped.atexit = False  # at exit the store takes the pins back itself; no I/O while Python shuts down
        return mapping

    # ------------------------------------------------------------------------------------------ other

    def status(self, timeout: float | None = None) -> d.StoreStatus:
        """What the store holds (local stores only): the numbers its heartbeats report."""
        return self._request(lambda rid: d.StatusRequest(rid), self._deadline(timeout), d.StoreStatus)

    def delete(self, object_ids: list[bytes]) -> None:
        """Standalone stores only (no scheduler link): nobody needs these objects any more."""
        with self._lock:
            self._send(d.Delete(list(object_ids)))

    def flush_releases(self) -> None:
        """Tell the store about mappings that are gone, unless a request is under way (it will, at its end)."""
        if self._closed or not self._lock.acquire(blocking=False):
            return
        try:
            self._send_releases()
        finally:
            self._lock.release()

    def sweep_kept_mappings(self) -> None:
        """Let go of the kept writable mappings that are no longer worth their memory (kept_mappings.py)."""
        self._kept_mappings.sweep()

    def close(self) -> None:
        """Close the socket. Objects still mapped stay valid; the store takes their pins back when we exit."""
        with self._lock:
            self._close_held()

    def close_if_idle(self) -> bool:
        """Close now unless a request is under way on another thread (then False, and nothing is done)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._close_held()
        finally:
            self._lock.release()
        return True

    def _close_held(self) -> None:
        if self._closed:
            return
        self._send_releases()
        self._closed = True
        self._kept_mappings.close()
        if self._lent is not None:
            self._lent.let_go_all()
        self._stop_probing()
        self._socket.close(linger=100)
        if self._own_context:
            self._context.term()

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ wire

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self._timeout if timeout is None else timeout)

    def _send(self, message: d.DataMessage) -> None:
        if self._closed:
            raise StoreError("this StoreClient is closed")
        self._socket.send_multipart(d.encode(message), copy=False)

    def _send_releases(self) -> None:
        object_ids = []
        while self._releases:
            object_ids.append(self._releases.popleft())
        if object_ids and not self._closed:
            self._send(d.Release(object_ids, self._pid))

    def _tell(self, make: Callable[[int], d.DataMessage], object_id: bytes) -> None:
        """Send a request whose answer a later request reads (and logs, if it is a refusal)."""
        with self._lock:
            request_id = self._next_request
            self._next_request += 1
            self._send_releases()
            self._send(make(request_id))
            self._unawaited[request_id] = object_id

    def _request(
        self, make: Callable[[int], d.DataMessage], deadline: float, expected: type | tuple[type, ...]
    ) -> Any:
        with self._lock:
            request_id = self._next_request
            self._next_request += 1
            message = make(request_id)
            if not self._relayed:
                self._send_releases()
                self._send(message)
            if self._relayed or (self._monitor is not None and not self._reachable(deadline)):
                answer = self._relayed_request(request_id, message, deadline)
            else:
                try:
                    answer = self._answer_to(request_id, deadline, type(message).__name__)
                finally:
                    self._send_releases()
        if isinstance(answer, expected):
            return answer
        if isinstance(answer, d.Missing):
            raise ObjectMissing(answer.object_id, answer.reason)
        if isinstance(answer, d.Failed):
            raise StoreError(f"the store at {self.store.data_address} refused: {answer.reason}")
        raise StoreError(f"the store answered {type(answer).__name__} to {type(message).__name__}")

    # ------------------------------------------------------------------------------------------ relay

    def _reachable(self, deadline: float) -> bool:
        """After the first request to a remote store is sent: whether a connection to it is made within the
        probe time. A store that is reachable loses no time; one that is not never gets the request (the
        socket is closed with what it queued), which goes through the scheduler instead."""
        assert self._monitor is not None
        poller = zmq.Poller()
        poller.register(self._monitor, zmq.POLLIN)
        poller.register(self._socket, zmq.POLLIN)
        wait = min(self._probe_seconds, max(0.0, deadline - time.monotonic()))
        if poller.poll(int(wait * 1000)):
            self._stop_probing()
            return True
        logger.warning(
            f"{self._relay.owner if self._relay else 'StoreClient'}: no connection to the store's data address "
            f"{self.store.data_address} within {self._probe_seconds:g}s; relaying its data through the scheduler"
        )
        self._stop_probing()
        self._relayed = True
        self._socket.close(linger=0)  # what it queued for the store must never arrive after the relayed copy
        return False

    def _stop_probing(self) -> None:
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            self._socket.disable_monitor()
            monitor.close(linger=0)

    def _relayed_request(self, request_id: int, message: d.DataMessage, deadline: float) -> d.DataMessage:
        relay = self._relay
        assert relay is not None
        relay.send(self.store.data_address, request_id, d.encode(message))
        while True:
            answer = relay.receive(self.store.data_address, deadline)
            if answer is None:
                raise StoreTimeout(
                    f"the store at {self.store.data_address} did not answer {type(message).__name__} in time "
                    "(relayed through the scheduler)"
                )
            if answer.error:
                if answer.request_id == request_id:
                    raise StoreGone(f"the scheduler could not relay to the store at {self.store.data_address}: "
                                    f"{answer.error}")
                continue
            try:
                decoded = d.decode(answer.frames)
            except d.ProtocolDecodeError as error:
                raise StoreError(f"the store at {self.store.data_address} sent a bad answer: {error}") from None
            if getattr(decoded, "request_id", None) == request_id:
                return decoded

    def _answer_to(self, request_id: int, deadline: float, what: str) -> d.DataMessage:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._socket.poll(max(1, int(remaining * 1000))):
                raise StoreTimeout(f"the store at {self.store.data_address} did not answer {what} in time")
            frames: list[Buffer] = [part.buffer for part in self._socket.recv_multipart(copy=False)]
            try:
                answer = d.decode(frames)
            except d.ProtocolDecodeError as error:
                raise StoreError(f"the store at {self.store.data_address} sent a bad answer: {error}") from None
            answered = getattr(answer, "request_id", None)
            if answered == request_id:
                return answer
            if answered in self._unawaited:
                object_id = self._unawaited.pop(answered)
                if isinstance(answer, d.Failed):
                    logger.warning(f"store client: the store at {self.store.data_address} refused object "
                                   f"{object_id.hex()}: {answer.reason}")
                    if self._lent is not None:  # a refused loan: the object is reported lost, and put again
                        self._lent.let_go([object_id])
                        self._stop_lending(answer.reason)
            if isinstance(answer, d.Located):
                self._releases.append(answer.object_id)  # a late answer to a get we gave up on: it pinned the object
