"""`scaler FILE.toml`: start what a site file lists (scheduler, stores, workers, worker managers, the web UI) as
child processes, and stop all of it on Ctrl-C or SIGTERM, or when one part fails.

The decisions are SiteCore's (site_core.py); this shell starts each part as `python -m scaler.cli.X --config
FILE`, forwards its output (each line prefixed by the part's name) keeping its last lines for a failure's
message, and feeds the core what it sees. Nothing outlives the site: every part gets SIGTERM, then SIGKILL
after the grace period, with what it started; if the site itself is killed, each part gets SIGTERM from the
kernel (Linux) and also sees its parent gone (SCALER_EXIT_WITH_PARENT).
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Sequence

from scaler.cli.site_core import (
    Action,
    Begin,
    CouldNotStart,
    Event,
    Exited,
    Reported,
    Say,
    SiteCore,
    Start,
    StopAll,
    StopAsked,
    Tick,
)
from scaler.cli.site_plan import Part, site_parts
from scaler.cli.site_settings import SITE
from scaler.utility.command_parser import parser_for
from scaler.utility.config_file import ConfigFileError, read_document
from scaler.utility.parent_watch import environment_exiting_with_this_process, signal_when_parent_dies
from scaler.utility.process_stop import stop_process
from scaler.utility.readiness import ReadinessPipe

_LOOK_SECONDS = 0.05
_LAST_LINES = 12


def build_parser() -> argparse.ArgumentParser:
    parser = parser_for(
        SITE, "scaler",
        "Start the Scaler site a TOML file describes: [scheduler], [store], [cluster], [slurm_cluster], "
        "[symphony_cluster] and [ui], each run as its command with --config FILE. Ctrl-C or SIGTERM stops it all.",
        file_argument="file",
    )
    parser.add_argument("file", metavar="FILE.toml", help="the site file; its [site] section sets the options below")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        parts = site_parts(read_document(args.file), args.file)
    except ConfigFileError as error:
        parser.exit(2, f"scaler: error: {error}\n")
    sys.exit(run_site(parts, args.file, args.start_timeout_seconds, args.stop_grace_seconds))


class _Child:
    """One started part: its process, its readiness pipe and what it printed last."""

    def __init__(self, part: Part, process: subprocess.Popen, pipe: ReadinessPipe) -> None:
        self.part = part
        self.process = process
        self.pipe = pipe
        self.last_lines: collections.deque[str] = collections.deque(maxlen=_LAST_LINES)
        self.exit_seen = False
        self._partial: dict[int, bytes] = {}
        self._streams = [(stream, target) for stream, target in ((process.stdout, sys.stdout),
                                                                   (process.stderr, sys.stderr)) if stream]
        for stream, _ in self._streams:
            os.set_blocking(stream.fileno(), False)

    def forward_output(self, final: bool = False) -> None:
        """Pass on whole lines, prefixed with the part's name; a grandchild may hold the pipe: never block."""
        for stream, target in self._streams:
            if stream.closed:
                continue
            data = self._partial.pop(stream.fileno(), b"")
            while True:
                try:
                    chunk = os.read(stream.fileno(), 65536)
                except (BlockingIOError, InterruptedError):
                    break
                if not chunk:
                    final = True
                    break
                data += chunk
            *lines, rest = data.split(b"\n")
            if final and rest:
                lines, rest = [*lines, rest], b""
            if rest:
                self._partial[stream.fileno()] = rest
            for raw in lines:
                line = raw.decode(errors="replace").rstrip("\r")
                self.last_lines.append(line)
                _write(target, f"[{self.part.name}] {line}\n")

    def close(self) -> None:
        self.forward_output(final=True)
        for stream, _ in self._streams:
            stream.close()
        self.pipe.close()


def run_site(parts: Sequence[Part], path: str, start_timeout_seconds: float, stop_grace_seconds: float) -> int:
    asked: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        asked.append(signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    core = SiteCore(parts, start_timeout_seconds)
    children: list[_Child] = []
    try:
        pending: list[Action] = core.handle(Begin(), time.monotonic())
        while True:
            events: list[Event] = []
            for action in pending:
                if isinstance(action, Say):
                    _write(sys.stderr, f"scaler: {action.message}\n")
                elif isinstance(action, Start):
                    child_or_why = _start(action.part)
                    if isinstance(child_or_why, str):
                        events.append(CouldNotStart(action.part.name, child_or_why))
                    else:
                        children.append(child_or_why)
                elif isinstance(action, StopAll):
                    _stop_all(children, stop_grace_seconds)
                    _write(sys.stderr, "scaler: every part has stopped\n")
                    return action.status
            pending = []
            if not events:
                time.sleep(_LOOK_SECONDS)
                events = _look(children, asked)
            now = time.monotonic()
            for event in [*events, Tick()]:
                pending += core.handle(event, now)
    finally:
        _stop_all(children, stop_grace_seconds)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _start(part: Part) -> _Child | str:
    pipe = ReadinessPipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", *part.command],
            env=pipe.child_environment(environment_exiting_with_this_process()),
            pass_fds=pipe.pass_fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Its own session: a Ctrl-C at the terminal reaches the site alone, which stops the parts in order.
            start_new_session=True,
            preexec_fn=signal_when_parent_dies(signal.SIGTERM),
        )
    except OSError as error:
        pipe.close()
        return str(error)
    pipe.children_started()
    return _Child(part, process, pipe)


def _look(children: list[_Child], asked: list[str]) -> list[Event]:
    events: list[Event] = []
    if asked:
        events.append(StopAsked(asked.pop()))
    for child in children:
        for report in child.pipe.read(0):
            events.append(Reported(child.part.name, report.state, report.detail))
        child.forward_output()
        status = child.process.poll()
        if status is not None and not child.exit_seen:
            child.exit_seen = True
            child.forward_output(final=True)
            events.append(Exited(child.part.name, status, tuple(child.last_lines)))
    return events


def _stop_all(children: list[_Child], grace_seconds: float) -> None:
    """The last started first: workers leave a scheduler that is still there to hear it.

    While this thread waits for each part, another forwards their output (the parts' pipes are handed to it
    until the end): a part, or a worker sharing its pipe, that logs much as it stops must not block on a full
    pipe and be killed for it."""
    if not children:
        return
    stopping = list(children)
    children.clear()
    done = threading.Event()

    def forward() -> None:
        while not done.wait(_LOOK_SECONDS):
            for child in stopping:
                child.forward_output()

    forwarder = threading.Thread(target=forward, name="scaler-site-output", daemon=True)
    forwarder.start()
    try:
        for child in reversed(stopping):
            stop_process(child.process, grace_seconds)
    finally:
        done.set()
        forwarder.join()
        for child in stopping:
            child.close()


def _write(target: IO[str], text: str) -> None:
    try:
        target.write(text)
        target.flush()
    except (OSError, ValueError):
        pass  # a closed terminal must not stop the site from stopping its parts


if __name__ == "__main__":
    main()
