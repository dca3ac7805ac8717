"""`scaler_top`'s terminal shell: curses draws the lines `top_screen.render` makes and reads the keys.

curses is the standard library's terminal layer (ncurses underneath): it restores the terminal on any
exit through `curses.wrapper`, handles resizing and keys, and adds no dependency to a tool that is
most useful on the bare servers where a scheduler runs.
"""

from __future__ import annotations

import curses
import signal
import textwrap
import time
from types import FrameType

import zmq

from scaler.protocol.monitor_feed import MonitorFeeds
from scaler.protocol.monitor_messages import MonitorSnapshot
from scaler.scheduler.config import default_monitor_address
from scaler.ui.top_screen import DEFAULT_SORT, SORT_SHORTCUTS, Screen, render, visible_part
from scaler.utility.handshake_failures import DEFAULT_SILENCE_SECONDS, HandshakeWatch

# How long one wait for a key lasts; bounds how late a snapshot or a key is shown.
_KEY_WAIT_MS = 100
# Redraw at least this often, so "no snapshot for Ns" keeps counting while the feed is silent.
_REDRAW_SECONDS = 1.0


class _Stop(Exception):
    pass


def not_a_monitor_hint(address: str) -> str:
    """What to say when `address` answers but is no monitor feed: most often the scheduler's own address."""
    if address.startswith("tcp://"):
        return (
            f"if it is the scheduler's own address, its monitor address is {default_monitor_address(address)} "
            "unless it was started with --monitor-address (it prints 'monitor address is ...' at start)"
        )
    return "give the monitor address the scheduler prints at start ('monitor address is ...')"


def run_top(address: str) -> int:
    """Show the monitor feed at `address` until q, Ctrl-C or SIGTERM; returns the exit code (0). Several monitor
    addresses (a scheduler's and its standbys', comma-separated): the feed of the one that serves."""

    def stop_on_signal(signum: int, frame: FrameType | None) -> None:
        raise _Stop()

    watches: list[HandshakeWatch] = []

    def watch(socket: zmq.Socket, feed_address: str) -> None:
        # Within seconds, say why nothing shows: nothing answers there, or it is no monitor feed.
        watches.append(HandshakeWatch(
            socket, feed_address, time.monotonic(), peer="a scheduler's monitor feed", role="scaler_top",
            silence_seconds=DEFAULT_SILENCE_SECONDS, not_the_peer_hint=not_a_monitor_hint(feed_address),
            peer_is_plain=True,
        ))

    previous_handler = signal.signal(signal.SIGTERM, stop_on_signal)
    try:
        with MonitorFeeds(address, before_connect=watch) as subscriber:
            try:
                curses.wrapper(_main_loop, subscriber, watches)
            finally:
                for connection in watches:
                    connection.close()
    except (KeyboardInterrupt, _Stop):
        pass  # curses.wrapper has restored the terminal already
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    return 0


def _main_loop(window: curses.window, subscriber: MonitorFeeds, connections: list[HandshakeWatch]) -> None:
    try:
        curses.curs_set(0)
    except curses.error:
        pass  # some terminals cannot hide the cursor
    window.timeout(_KEY_WAIT_MS)
    sort_by = DEFAULT_SORT
    snapshot: MonitorSnapshot | None = None
    scroll = 0
    last_drawn = 0.0
    dirty = True
    while True:
        key = window.getch()
        if key != -1:
            character = chr(key) if 0 <= key < 256 else ""
            if character in ("q", "Q"):
                return
            if character in SORT_SHORTCUTS:
                sort_by = SORT_SHORTCUTS[character]
            scroll = _scrolled(scroll, key, window.getmaxyx()[0])
            dirty = True  # any key, a resize included, redraws
        newest = subscriber.receive(0)
        if newest is not None:
            snapshot = newest
            dirty = True
        now = time.monotonic()
        if [connection for connection in connections if connection.poll(now)]:  # each one polled
            dirty = True
        if dirty or now - last_drawn >= _REDRAW_SECONDS:
            problem = " ".join(connection.problem for connection in connections if connection.problem)
            scroll = _draw(window, snapshot, sort_by, subscriber, problem, scroll)
            last_drawn = now
            dirty = False


def _scrolled(scroll: int, key: int, height: int) -> int:
    """The scroll offset after `key`; `_draw` clamps it to what there is to show."""
    page = max(1, height - 2)
    steps = {curses.KEY_UP: -1, curses.KEY_DOWN: 1, curses.KEY_PPAGE: -page, curses.KEY_NPAGE: page}
    if key == curses.KEY_HOME:
        return 0
    if key == curses.KEY_END:
        return 1 << 30
    return max(0, scroll + steps.get(key, 0))


def _draw(
    window: curses.window, snapshot: MonitorSnapshot | None, sort_by: str, subscriber: MonitorFeeds, problem: str,
    scroll: int,
) -> int:
    """Draw the screen scrolled by `scroll` lines; returns the offset actually shown."""
    screen = render(snapshot, sort_by, subscriber.address, subscriber.seconds_since_last())
    height, width = window.getmaxyx()
    if problem:  # on top, where the eye starts, wrapped to the width; the rest moves down
        wrapped = textwrap.wrap(problem, max(20, width - 1))
        screen = Screen([*wrapped, *screen.lines], {row + len(wrapped) for row in screen.emphasized})
    screen, scroll = visible_part(screen, scroll, height)
    window.erase()
    for row, line in enumerate(screen.lines[:height]):
        attributes = curses.A_BOLD if row in screen.emphasized else curses.A_NORMAL
        try:
            # One column short of the edge: writing the bottom-right cell makes curses raise.
            window.addnstr(row, 0, line, max(0, width - 1), attributes)
        except curses.error:
            pass
    window.refresh()
    return scroll
