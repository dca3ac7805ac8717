"""Where what tasks print (Client(stream_output=True)) appears in the client: the client's own sys.stdout and
sys.stderr, each line prefixed by the worker and the task, as "[worker-name task 0x1a2b] text".

A task's standard output goes to sys.stdout; its standard error and its log records (formatted on the worker as
"LEVEL logger: message") to sys.stderr. The client's I/O thread writes them as they arrive, before it hands over
the results that follow them, so a task's lines come in the order it printed them and before its result.
The streams are looked up at each write, so a redirection (contextlib.redirect_stdout, pytest's capture) sees them.
"""

from __future__ import annotations

import logging
import sys

from scaler.protocol import messages as m

logger = logging.getLogger(__name__)


def show_task_output(output: m.TaskOutput) -> None:
    try:
        for task_id, stream, text in zip(output.task_ids, output.streams, output.texts):
            prefix = f"[{output.worker} task {task_id:#x}] "
            target = sys.stdout if stream == m.OutputStream.STDOUT else sys.stderr
            if target is None:
                continue  # pythonw, or a daemon with its streams closed
            target.write("".join(prefix + line + "\n" for line in text.splitlines()))
            target.flush()
    except Exception as error:  # a closed or broken stream must not stop the client's I/O thread
        logger.debug(f"Client: could not show a task's output: {error!r}")
