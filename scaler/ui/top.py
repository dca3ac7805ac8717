"""`scaler_top`'s terminal shell: curses draws the lines `top_screen.render` makes and reads the keys.

curses is the standard library's terminal layer (ncurses underneath): it restores the terminal on any
exit through `curses.wrapper`, handles resizing and keys, and adds no dependency to a tool that is
most useful on the bare servers where a scheduler runs.
"""

from __future__ import annotations

import curses
import signal
import time
from types import FrameType

from scaler.protocol.monitor_feed import MonitorSubscriber
from scaler.protocol.monitor_messages import MonitorSnapshot
from scaler.ui.top_screen import DEFAULT_SORT, SORT_SHORTCUTS, render

# How long one wait for a key lasts; bounds how late a snapshot or a key is shown.
_KEY_WAIT_MS = 100
# Redraw at least this often, so "no snapshot for Ns" keeps counting while the feed is silent.
_REDRAW_SECONDS = 1.0


class _Stop(Exception):
    pass


def run_top(address: str) -> int:
    """Show the monitor feed at `address` until q, Ctrl-C or SIGTERM; returns the exit code (0)."""

    def stop_on_signal(signum: int, frame: FrameType | None) -> None:
        raise _Stop()

    previous_handler = signal.signal(signal.SIGTERM, stop_on_signal)
    try:
        with MonitorSubscriber(address) as subscriber:
            curses.wrapper(_main_loop, subscriber)
    except (KeyboardInterrupt, _Stop):
        pass  # curses.wrapper has restored the terminal already
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    return 0


def _main_loop(window: curses.window, subscriber: MonitorSubscriber) -> None:
    try:
        curses.curs_set(0)
    except curses.error:
        pass  # some terminals cannot hide the cursor
    window.timeout(_KEY_WAIT_MS)
    sort_by = DEFAULT_SORT
    snapshot: MonitorSnapshot | None = None
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
            dirty = True  # any key, a resize included, redraws
        newest = subscriber.receive(0)
        if newest is not None:
            snapshot = newest
            dirty = True
        now = time.monotonic()
        if dirty or now - last_drawn >= _REDRAW_SECONDS:
            _draw(window, snapshot, sort_by, subscriber)
            last_drawn = now
            dirty = False


def _draw(window: curses.window, snapshot: MonitorSnapshot | None, sort_by: str, subscriber: MonitorSubscriber) -> None:
    screen = render(snapshot, sort_by, subscriber.address, subscriber.seconds_since_last())
    height, width = window.getmaxyx()
    window.erase()
    for row, line in enumerate(screen.lines[:height]):
        attributes = curses.A_BOLD if row in screen.emphasized else curses.A_NORMAL
        try:
            # One column short of the edge: writing the bottom-right cell makes curses raise.
            window.addnstr(row, 0, line, max(0, width - 1), attributes)
        except curses.error:
            pass
    window.refresh()
