"""SCALER_HOP_TRACE=DIR (benchmarks/round_trip_hops.py --trace): each message a process sends or receives is
logged in DIR/<pid>.txt as `monotonic-ns S|R`, as its send starts or its receive ends, which orders the hops of
a round trip across processes. Every transport logs through here (zmq_util.py, frame_stream.py); `log` is None
when the variable is unset, decided at import, so that the hot paths pay one test at most."""

from __future__ import annotations

import os
import time
from typing import Callable, TextIO


def _logger(directory: str) -> Callable[[str], None]:
    files: dict[int, TextIO] = {}

    def log(kind: str) -> None:
        pid = os.getpid()  # a forked child writes a file of its own
        out = files.get(pid)
        if out is None:
            out = files[pid] = open(os.path.join(directory, f"{pid}.txt"), "a", buffering=1)
        out.write(f"{time.monotonic_ns()} {kind}\n")

    return log


_DIRECTORY = os.environ.get("SCALER_HOP_TRACE")
log: Callable[[str], None] | None = _logger(_DIRECTORY) if _DIRECTORY else None
