"""The store process's I/O shell: two ROUTER sockets, one thread, feeding the core and doing what it says.

The local socket (ipc://, in a work directory of mode 0700 that the store owns and removes) serves the
processes of this host: allocate and seal (a writer hands over a segment it wrote), a local get (the
reader maps the segment through /proc), release. The remote socket (tcp://) serves everyone: put (the
payload comes as frames and is copied into a segment) and get (the payload leaves as a frame read by
zmq straight from the segment's mapping). To fetch an object from another store, this store is a
remote reader of it (holder_fetches.py). A peer that cannot reach the tcp socket sends its requests
through the scheduler, which passes them over the scheduler link (relay, PROTOCOL.md §19): they are
served as remote requests, and answered the same way.

The core decides; this shell owns the segments, the spill files and the sockets, and reports back.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
from typing import Callable

import zmq

from scaler.protocol import data_messages as d
from scaler.protocol import messages as m
from scaler.protocol.messages import Buffer
from scaler.protocol.stored_payload import StoredPayloadError, split_frames
from scaler.store import store_actions as a
from scaler.store import store_core as c
from scaler.store import store_records as r
from scaler.store.borrowed_memory import LoanUnreadable, check, loan_layout, read_payload
from scaler.store.holder_fetches import Fetched, FetchEvent, FetchFailed, HolderFetches
from scaler.store.process_watch import ProcessWatch
from scaler.store.scheduler_link import (
    DeleteOrder,
    Registered,
    RelayedAnswer,
    RelayedRequest,
    SchedulerLink,
    StopStore,
    StoreIdentity,
)
from scaler.store.segment import check_available
from scaler.store.server_config import StoreServerConfig, StoreStartError, tcp_bind_address
from scaler.store.spill import SpillError
from scaler.store.store_memory import StoreMemory
from scaler.utility.bad_frame_log import BadFrameLog, short_identity
from scaler.utility.host_key import this_host_key
from scaler.utility.loop_stop import LoopStop
from scaler.utility.owned_directory import make_owned_directory, remove_abandoned_directories
from scaler.utility.wording import with_article

logger = logging.getLogger(__name__)

WORK_DIRECTORY_PREFIX = "scaler-store-"
DATA_SOCKET_NAME = "data.sock"
# Data protocol control frames are small (a release of many ids is the largest): a bigger one is not ours.
MAX_CONTROL_FRAME_BYTES = 1 << 20
_TICK_SECONDS = 0.25
# Receive at most this many messages per socket before looking at timers and the other sockets.
_MAX_MESSAGES_PER_WAKE = 64
# Where a request came from, the first byte of its answer's routing key: the ipc socket, the tcp socket, or
# the scheduler link (relayed: the rest of the key is the requester's identity at the scheduler).
_LOCAL, _REMOTE, _RELAYED = 0, 1, 2


class StoreServer:
    def __init__(self, config: StoreServerConfig, link: SchedulerLink | None = None) -> None:
        self._config = config
        self._link = link
        self._stop = LoopStop()
        self._core: c.StoreCore | None = None
        self._context: zmq.Context | None = None
        self._routers: list[zmq.Socket] = []  # [local (ipc), remote (tcp)]: a routing key's first byte
        self._memory = StoreMemory(config.spill_directory)
        self._watch = ProcessWatch()
        self._poller = zmq.Poller()
        self._holders: HolderFetches | None = None  # made with the context
        self._transfers: list[tuple[zmq.MessageTracker, int]] = []
        self._bad_frame_log = BadFrameLog()
        self._link_sockets: list[zmq.Socket] = []
        self.identity: StoreIdentity | None = None
        self.failed = False  # stopped because it cannot work (refused by its scheduler): its process exits with 1
        # stop() writes here, so that a poll in progress ends at once instead of at its timeout.
        self._stop.open()

    @property
    def core(self) -> c.StoreCore:
        assert self._core is not None
        return self._core

    def stop(self) -> None:
        """Ask the loop to finish; safe from any thread or a signal handler."""
        self._stop.request()

    def run(
        self, exit_with_parent: int | None = None, on_listening: Callable[[StoreIdentity], None] | None = None
    ) -> None:
        """Serve until stopped; removes everything it made when it returns. StoreStartError if it cannot start."""
        config = self._config
        try:
            check_available()
            bind_address = tcp_bind_address(config.data_address)
        except Exception as error:
            raise StoreStartError(f"Store: cannot start: {error}") from None
        removed = remove_abandoned_directories(WORK_DIRECTORY_PREFIX, config.work_directory_parent)
        if removed:
            logger.info(f"Store: removed {len(removed)} work directories of stores that died")
        work_directory = make_owned_directory(WORK_DIRECTORY_PREFIX, config.work_directory_parent)
        self._context = zmq.Context(io_threads=1)
        self._memory.start()
        self._holders = HolderFetches(self._context, self._poller, self._link.send_relay if self._link else None)
        local = self._router()
        remote = self._router()
        self._routers = [local, remote]
        try:
            ipc_address = f"ipc://{os.path.join(work_directory, DATA_SOCKET_NAME)}"
            if "[" in bind_address:
                remote.setsockopt(zmq.IPV6, 1)
            try:
                local.bind(ipc_address)
                remote.bind(bind_address)
            except zmq.ZMQError as error:
                raise StoreStartError(f"Store: cannot listen on {config.data_address}: {error}") from None
            data_address = remote.getsockopt_string(zmq.LAST_ENDPOINT)
            self.identity = StoreIdentity(
                data_address=data_address, ipc_address=ipc_address, host_key=config.host_key or this_host_key(),
                capacity_bytes=config.capacity_bytes, pid=os.getpid(),
            )
            self._core = c.StoreCore(r.StoreConfig(
                config.capacity_bytes, own_address=data_address, pool_idle_seconds=config.pool_idle_seconds
            ))
            if self._link is not None:
                self._link_sockets = self._link.start(self._context, self.identity, time.monotonic())
            logger.info(
                f"Store: listening on {data_address} and {ipc_address}, capacity {config.capacity_bytes:,} bytes, "
                f"spilling to {self._memory.spill_directory}"
            )
            if on_listening is not None:
                on_listening(self.identity)
            self._loop(exit_with_parent)
        finally:
            self._close()
            shutil.rmtree(work_directory, ignore_errors=True)
            logger.info("Store: stopped")

    # ------------------------------------------------------------------------------------------ loop

    def _router(self) -> zmq.Socket:
        assert self._context is not None
        socket = self._context.socket(zmq.ROUTER)
        # Never drop a message silently: a ROUTER drops on a full queue unless the limit is lifted.
        socket.setsockopt(zmq.SNDHWM, 0)
        socket.setsockopt(zmq.RCVHWM, 0)
        socket.setsockopt(zmq.LINGER, 0)
        return socket

    def _loop(self, exit_with_parent: int | None) -> None:
        local, remote = self._routers
        for socket in (local, remote, *self._link_sockets):
            self._poller.register(socket, zmq.POLLIN)
        self._poller.register(self._stop.fileno(), zmq.POLLIN)
        next_tick = time.monotonic() + _TICK_SECONDS
        while not self._stop.requested:
            deadline = next_tick
            core_deadline = self.core.next_deadline()
            if core_deadline is not None:
                deadline = min(deadline, core_deadline)
            if self._transfers:
                # zmq says nothing when it is done with a send: look again soon, its segment is pinned till then.
                deadline = min(deadline, time.monotonic() + 0.005)
            for socket, _ in self._poller.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                if socket is local or socket is remote:
                    self._drain(socket)
                elif self._holders is not None and self._holders.owns(socket):
                    self._on_fetch_events(self._holders.drain(socket))
                elif socket == self._stop.fileno():
                    continue  # stop() was called: the loop condition ends it
                elif self._link is not None:
                    self._on_link_events(self._link.on_readable(socket, time.monotonic()))
            self._finish_transfers()
            now = time.monotonic()
            if core_deadline is not None and now >= core_deadline:
                self._execute(self.core.on_tick(now))
            if now >= next_tick:
                next_tick = now + _TICK_SECONDS
                self._on_tick(now)
                if exit_with_parent is not None and os.getppid() != exit_with_parent:
                    logger.warning("Store: parent process is gone, exiting")
                    return

    def _on_tick(self, now: float) -> None:
        self._execute(self.core.on_tick(now))
        for pid in self._watch.gone():
            self._execute(self.core.on_process_gone(pid, now))
        if self._holders is not None:
            self._holders.forget_stale(now)
            self._holders.check_probes(now)
        for line in self._bad_frame_log.on_tick(now):
            logger.warning(_as_store_line(line))
        if self._link is not None:
            self._on_link_events(self._link.on_tick(self.core.status(), now))

    def _on_link_events(self, events: list) -> None:
        for event in events:
            if isinstance(event, DeleteOrder):
                self._execute(self.core.on_delete(list(event.object_ids), time.monotonic()))
            elif isinstance(event, Registered):
                self._link.objects_held(self.core.held_objects())  # type: ignore[union-attr]
            elif isinstance(event, StopStore):
                logger.log(logging.ERROR if event.failed else logging.WARNING, f"Store: stopping: {event.reason}")
                self.failed = self.failed or event.failed
                self.stop()
            elif isinstance(event, RelayedRequest):
                self._handle([event.peer, *event.frames], _RELAYED)
            elif isinstance(event, RelayedAnswer) and self._holders is not None:
                self._on_fetch_events(self._holders.on_relayed_answer(
                    event.store, event.request_id, event.frames, event.error
                ))

    def _drain(self, socket: zmq.Socket) -> None:
        origin = _LOCAL if socket is self._routers[0] else _REMOTE
        for _ in range(_MAX_MESSAGES_PER_WAKE):
            try:
                frames: list[Buffer] = [part.buffer for part in socket.recv_multipart(zmq.NOBLOCK, copy=False)]
            except zmq.Again:
                return
            self._handle(frames, origin)

    def _bad_frame(self, sender: bytes, what: str) -> None:
        for line in self._bad_frame_log.on_dropped(sender, what, time.monotonic()):
            logger.warning(_as_store_line(line))

    def _handle(self, frames: list[Buffer], origin: int) -> None:
        identity = bytes(frames[0])
        is_local = origin == _LOCAL
        if len(frames) < 2 or len(frames[1]) > MAX_CONTROL_FRAME_BYTES:
            self._bad_frame(identity, "a message without a data protocol frame")
            return
        try:
            message = d.decode(frames[1:])
        except d.ProtocolDecodeError as error:
            self._bad_frame(identity, f"an undecodable message ({error})")
            return
        # The answer's routing key: where the request came from, then the peer's identity there.
        peer = bytes((origin,)) + identity
        now = time.monotonic()
        core = self.core
        payload: list[Buffer] | None = None
        try:
            if isinstance(message, d.Put):
                payload = message.payload
                actions = core.on_put(a.Requester(peer, message.request_id), message.object_id, message.size,
                                      message.name, now)
            elif isinstance(message, d.Get) and (is_local or not message.local):
                actions = core.on_get(
                    a.Requester(peer, message.request_id), message.object_id, message.local, message.pid,
                    message.wait_ms / 1000, message.holder, now, message.max_frame_bytes,
                )
            elif not is_local and isinstance(message, (d.Allocate, d.Seal, d.Get, d.Lend)):
                reason = "local requests (allocate, seal, lend, a local get) come over the store's ipc address"
                actions = [a.Reply(a.Requester(peer, message.request_id), d.Failed(message.request_id, reason))]
            elif isinstance(message, d.Allocate) and is_local:
                actions = core.on_allocate(a.Requester(peer, message.request_id), message.size, message.pid, now)
            elif isinstance(message, d.Seal) and is_local:
                actions = core.on_seal(
                    a.Requester(peer, message.request_id), self._memory.segment_id_at(message.path),
                    message.object_id, message.size, message.name, message.pid, now,
                )
            elif isinstance(message, d.Lend) and is_local:
                requester = a.Requester(peer, message.request_id)
                problem = self._loan_problem(message)
                if problem:
                    actions = [a.Reply(requester, d.Failed(message.request_id, problem))]
                else:
                    actions = core.on_lend(requester, message.object_id, message.size, message.name, message.loan, now)
            elif isinstance(message, d.Release) and is_local:
                actions = core.on_release(message.pid, message.object_ids, now)
            elif isinstance(message, d.Delete) and is_local and self._link is None:
                actions = core.on_delete(message.object_ids, now)
            elif isinstance(message, d.StatusRequest) and is_local:
                actions = [a.Reply(a.Requester(peer, message.request_id), _status_message(message.request_id, core))]
            else:
                where = "ipc" if is_local else "tcp"
                what = with_article(type(message).__name__)
                self._bad_frame(identity, f"{what}, which the store does not take over {where}")
                return
        except Exception:
            # A bug triggered by one message must not take the store, and every object in it, down.
            logger.exception(f"Store: failed to handle {type(message).__name__} from {short_identity(identity)}")
            return
        self._execute(actions, payload)

    # ------------------------------------------------------------------------------------------ actions

    def _execute(self, actions: list[a.Action], payload: list[Buffer] | None = None) -> None:
        """Do what the core decided, in order, then what the core says to what was reported back."""
        follow_ups: list[a.Action] = []
        now = time.monotonic()
        for action in actions:
            try:
                follow_ups += self._do(action, payload, now)
            except Exception:
                logger.exception(f"Store: could not {type(action).__name__}")
        if follow_ups:
            self._execute(follow_ups)

    def _do(self, action: a.Action, payload: list[Buffer] | None, now: float) -> list[a.Action]:
        core = self.core
        memory = self._memory
        if isinstance(action, a.CreateSegment):
            memory.create(action.segment_id, action.capacity, action.prefault)
        elif isinstance(action, a.DestroySegment):
            memory.destroy(action.segment_id)
        elif isinstance(action, a.SpillObject):
            try:
                memory.spill(action.object_id, action.segment_id, action.size)
            except SpillError as error:
                logger.warning(f"Store: cannot spill, running over capacity for now: {error}")
                capacity = memory.segment(action.segment_id).capacity
                return core.on_spill_failed(action.object_id, action.segment_id, capacity, now)
        elif isinstance(action, a.ReadBack):
            try:
                memory.read_back(action.object_id, action.segment_id)
            except SpillError as error:
                logger.error(f"Store: lost object {action.object_id.hex()}: {error}")
                return core.on_read_back_done(action.object_id, False, str(error), now)
            return core.on_read_back_done(action.object_id, True, "", now)
        elif isinstance(action, a.DropSpill):
            memory.drop_spill(action.object_id)
        elif isinstance(action, a.WritePayload):
            assert payload is not None
            memory.write(action.segment_id, payload)
        elif isinstance(action, a.Fetch):
            self._fetch(action, now)
        elif isinstance(action, a.GrantSegment):
            path = memory.segment(action.segment_id).path
            self._reply(action.to.peer, d.Segment(action.to.request_id, path, action.size))
        elif isinstance(action, a.Locate):
            path = memory.segment(action.segment_id).path
            self._reply(action.to.peer, d.Located(action.to.request_id, action.object_id, path, action.size))
        elif isinstance(action, a.SendObject):
            self._send_object(action)
        elif isinstance(action, a.SendBorrowed):
            return self._send_borrowed(action, now)
        elif isinstance(action, a.Reply):
            self._reply(action.to.peer, action.message)
        elif isinstance(action, a.WatchProcess):
            self._watch.watch(action.pid)
        elif isinstance(action, a.UnwatchProcess):
            self._watch.unwatch(action.pid)
        elif isinstance(action, a.ReportHeld):
            if self._link is not None:
                self._link.objects_held(action.objects)
        elif isinstance(action, a.ReportLost):
            if self._link is not None:
                self._link.objects_lost(action.object_ids)
        return []

    def _reply(self, peer: bytes, message: d.DataMessage) -> None:
        try:
            self._send_data(peer, d.encode(message), track=False)
        except zmq.ZMQError as error:
            logger.warning(f"Store: could not answer {short_identity(peer[1:])}: {error}")

    def _send_data(self, peer: bytes, frames: list[Buffer], track: bool) -> zmq.MessageTracker | None:
        """A data message to the peer a request came from: on its socket, or back through the scheduler."""
        identity = peer[1:]
        if peer[0] == _RELAYED:
            assert self._link is not None
            return self._link.send_relay(m.Relay(frames=frames, peer=identity), track)
        socket = self._routers[peer[0]]
        if not track:
            socket.send_multipart([identity, *frames], copy=False)
            return None
        trackers = [socket.send(identity, zmq.SNDMORE, copy=False, track=True)]
        trackers += [socket.send(frame, zmq.SNDMORE, copy=False, track=True) for frame in frames[:-1]]
        trackers.append(socket.send(frames[-1], copy=False, track=True))
        return zmq.MessageTracker(*[tracker for tracker in trackers if tracker])

    def _send_object(self, action: a.SendObject) -> None:
        """The object's bytes leave as frames that zmq reads from the segment: pinned until zmq is done."""
        payload: list[Buffer] = [memoryview(self._memory.segment(action.segment_id).mapping())[: action.size]]
        if action.max_frame_bytes:
            payload = split_frames(payload, action.max_frame_bytes)
        frames = d.encode(d.ObjectData(action.to.request_id, action.object_id, payload))
        tracker = None
        try:
            tracker = self._send_data(action.to.peer, frames, track=True)
        except zmq.ZMQError as error:
            logger.warning(f"Store: could not send an object to {short_identity(action.to.peer[1:])}: {error}")
        # The segment stays pinned until zmq has let go of every frame that views it.
        self._transfers.append((tracker or zmq.MessageTracker(), action.transfer))

    def _loan_problem(self, lend: d.Lend) -> str:
        """Why this store does not take the loan (empty: it does)."""
        if not self._config.borrowing:
            return "this store does not borrow writers' memory (started with --no-borrowing)"
        try:
            loan_layout(lend.loan, lend.size)
            check(lend.loan)
        except (StoredPayloadError, LoanUnreadable) as error:
            return f"cannot borrow: {error}"
        return ""

    def _send_borrowed(self, action: a.SendBorrowed, now: float) -> list[a.Action]:
        """A borrowed object for a remote reader: read out of its lender's memory into a buffer that the
        frames then view (zmq keeps it alive until sent)."""
        try:
            payload: list[Buffer] = [memoryview(read_payload(action.loan, action.size))]
        except (LoanUnreadable, StoredPayloadError) as error:
            self._reply(action.to.peer, d.Missing(action.to.request_id, action.object_id, f"lost: {error}"))
            return self.core.on_loan_broken(action.object_id, str(error), now)
        if action.max_frame_bytes:
            payload = split_frames(payload, action.max_frame_bytes)
        try:
            self._send_data(action.to.peer, d.encode(d.ObjectData(action.to.request_id, action.object_id, payload)),
                            track=False)
        except zmq.ZMQError as error:
            logger.warning(f"Store: could not send an object to {short_identity(action.to.peer[1:])}: {error}")
        return []

    def _finish_transfers(self) -> None:
        if not self._transfers:
            return
        done = [transfer for tracker, transfer in self._transfers if tracker.done]
        if not done:
            return
        self._transfers = [(tracker, transfer) for tracker, transfer in self._transfers if not tracker.done]
        now = time.monotonic()
        for transfer in done:
            self._execute(self.core.on_transfer_done(transfer, now))

    # ------------------------------------------------------------------------------------------ fetching

    def _fetch(self, action: a.Fetch, now: float) -> None:
        """Get the object from the store holding it, as any remote reader does."""
        assert self._holders is not None
        problem = self._holders.request(action.holder, action.object_id, action.wait_ms, now)
        if problem is not None:
            self._execute(self.core.on_fetch_failed(action.object_id, problem, now))

    def _on_fetch_events(self, events: list[FetchEvent]) -> None:
        for event in events:
            now = time.monotonic()
            if isinstance(event, Fetched):
                self._execute(self.core.on_fetched(event.object_id, event.size, now), event.payload)
            elif isinstance(event, FetchFailed):
                self._execute(self.core.on_fetch_failed(event.object_id, event.reason, now))
            else:
                self._bad_frame(event.holder.encode(), event.what)

    # ------------------------------------------------------------------------------------------ exit

    def _close(self) -> None:
        # The link first: its goodbye must leave before the context goes.
        if self._link is not None:
            try:
                self._link.close()
            except Exception:
                logger.exception("Store: closing the scheduler link failed")
        if self._holders is not None:
            self._holders.close()
        for socket in [*self._routers, *self._link_sockets]:
            socket.close(linger=0)
        if self._context is not None:
            self._context.term()
        self._memory.close()
        self._watch.close()
        self._stop.close()


def _status_message(request_id: int, core: c.StoreCore) -> d.StoreStatus:
    status = core.status()
    return d.StoreStatus(
        request_id=request_id, capacity_bytes=status.capacity_bytes, resident_bytes=status.resident_bytes,
        held_bytes=status.held_bytes, spilled_bytes=status.spilled_bytes, pinned_bytes=status.pinned_bytes,
        pooled_bytes=status.pooled_bytes, object_count=status.object_count,
    )


def _as_store_line(line: str) -> str:
    # BadFrameLog writes the scheduler's lines; the same wording serves the store.
    return line.replace("Scheduler:", "Store:", 1)


def run_store(
    config: StoreServerConfig, exit_with_parent: int | None = None,
    on_listening: Callable[[StoreIdentity], None] | None = None, link: SchedulerLink | None = None,
) -> bool:
    """Run until SIGINT/SIGTERM (or the parent, if given, is gone); whether it stopped because it cannot work."""
    server = StoreServer(config, link)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: server.stop())
    server.run(exit_with_parent=exit_with_parent, on_listening=on_listening)
    return server.failed
