"""KeyTable: the keys one Client holds, each with its shared state, and when they are let go.

A key is held by each of its Futures, by each waiting task that reads it, and by `fire_and_forget` until it
ends. Once nothing holds it, it leaves the table and its kept result is released on the cluster.
A failed attempt with retries left is submitted again on the table's retry thread: the done-callback that
sees the failure runs on the native client's I/O thread, which a submit may need.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
from collections.abc import Hashable
from typing import Callable

from scaler.client.future import ScalerFuture
from scaler.client.object_reference import ObjectReference
from scaler.compat.dask.distributed.future import KeyState


class KeyTable:
    def __init__(self) -> None:
        self.lock = threading.RLock()  # also held by a Client across a key's check and its submit
        self._states: dict[Hashable, KeyState] = {}
        self._forgotten: set[KeyState] = set()  # fire_and_forget: held until they end
        self._retrier: concurrent.futures.ThreadPoolExecutor | None = None
        self._open = True

    def get(self, key: Hashable) -> KeyState | None:
        with self.lock:
            return self._states.get(key)

    def state_of(self, key: Hashable) -> KeyState:
        state = self.get(key)
        if state is None:
            raise KeyError(f"no future of key {key!r} on this client")
        return state

    def hold(self, state: KeyState) -> None:
        with self.lock:
            state.holders += 1

    def let_go(self, state: KeyState) -> None:
        with self.lock:
            state.holders -= 1
            if state.holders > 0 or state in self._forgotten:
                return
            if self._states.get(state.key) is state:
                del self._states[state.key]
            still_open = self._open
        release = getattr(state.native, "release", None)  # a result kept on the cluster (keep=True)
        if still_open and release is not None:
            release()

    def forget(self, state: KeyState) -> None:
        """A cancelled key: out of the table (the same key submitted again runs anew), its kept result released
        once its task has ended, while Futures may still name it."""
        with self.lock:
            if self._states.get(state.key) is state:
                del self._states[state.key]
            still_open = self._open
        release = getattr(state.native, "release", None)
        if still_open and release is not None:
            state.outcome.add_done_callback(lambda _: release())

    def let_go_all(self, states: list[KeyState]) -> None:
        for state in states:
            self.let_go(state)

    def track(
        self, key: Hashable, native: ScalerFuture, dependencies: list[KeyState], retries: int = 0,
        resubmit: Callable[[], ScalerFuture] | None = None,
    ) -> KeyState:
        """A new key, whose outcome completes when `native` (or its last retry) ends; the keys it reads are
        held until then."""
        state = KeyState(key, native)
        state.retries_left, state.resubmit = retries, resubmit
        for dependency in dependencies:
            self.hold(dependency)
        if dependencies:
            state.outcome.add_done_callback(lambda _: self.let_go_all(dependencies))
        native.add_done_callback(functools.partial(self._attempt_ended, state))
        with self.lock:
            self._states[key] = state
        return state

    def add_scattered(self, key: Hashable, reference: ObjectReference) -> KeyState:
        state = KeyState(key, None, reference)
        with self.lock:
            self._states[key] = state
        return state

    def forget_until_done(self, state: KeyState) -> None:
        with self.lock:
            self._forgotten.add(state)

        def ended(_: concurrent.futures.Future) -> None:
            with self.lock:
                self._forgotten.discard(state)
                state.holders += 1
            self.let_go(state)  # released now if no Future holds it any more

        state.outcome.add_done_callback(ended)

    def take_all(self, closing: bool) -> list[KeyState]:
        """Empty the table (a restart, or the client closing); the states it held, retries stopped."""
        with self.lock:
            states, self._states = list(self._states.values()), {}
            self._forgotten.clear()
            retrier = None
            if closing:
                self._open = False
                retrier, self._retrier = self._retrier, None
        if retrier is not None:
            retrier.shutdown(wait=False)
        for state in states:
            state.retries_left = 0
        return states

    def _attempt_ended(self, state: KeyState, native: ScalerFuture) -> None:
        if native is not state.native or state.outcome.done():
            return
        failed = not native.cancelled() and concurrent.futures.Future.exception(native, 0) is not None
        if failed and state.retries_left > 0 and state.resubmit is not None:
            state.retries_left -= 1
            with self.lock:
                retrier = self._retrier
                if retrier is None and self._open:
                    retrier = self._retrier = concurrent.futures.ThreadPoolExecutor(1, "scaler-dask-retries")
            if retrier is not None:
                try:
                    retrier.submit(self._retry, state)
                    return
                except RuntimeError:
                    pass  # the client closed meanwhile: the failure stands
        settle(state)

    def _retry(self, state: KeyState) -> None:
        assert state.resubmit is not None
        try:
            native = state.resubmit()
        except BaseException:
            settle(state)  # the failed attempt's error stands
            return
        state.native = native
        native.add_done_callback(functools.partial(self._attempt_ended, state))


def settle(state: KeyState) -> None:
    try:
        state.outcome.set_result(None)
    except concurrent.futures.InvalidStateError:
        pass  # settled meanwhile by another path (the client closing)
