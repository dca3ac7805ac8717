"""A child forked from the test that reports back on a pipe: the last argument its target gets is the pipe's
sending end, which the parent closes at once, so that a child that dies unheard ends the parent's wait."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
from typing import Any, Callable

FORK = multiprocessing.get_context("fork")


def start_forked_child(
    target: Callable[..., object], *args: Any
) -> tuple[multiprocessing.process.BaseProcess, multiprocessing.connection.Connection]:
    """The started child and the pipe's receiving end."""
    receiver, sender = FORK.Pipe(duplex=False)
    child = FORK.Process(target=target, args=(*args, sender))
    child.start()
    sender.close()
    return child, receiver
