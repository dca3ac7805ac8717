"""WarningRecorder: the processor's `warnings.showwarning`, which keeps what a task warns for its client.

Installed once per processor, with a single filter, "always", in place of the worker's own: every
warning a task raises reaches the recorder, and the caller's filters decide later, in the client, what
to show, ignore or raise (see scaler/protocol/task_warnings.py). A task that sets filters of its own
(inside `warnings.catch_warnings()` or not) is obeyed as it would be in a local process.

Nothing is done per task that warns nothing beyond setting and clearing `task_id`: the work happens in
`showwarning`, which Python calls only for a warning that passed the filters.

One task sends each distinct warning (category, text, location) once, and at most
MAX_WARNINGS_PER_TASK distinct ones: a loop that warns a million times sends one record, not a
million. Past the cap, one RuntimeWarning at the first left-out warning's location says how many
were left out.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from types import FrameType
from typing import Any, TextIO

from scaler.protocol import messages as m
from scaler.protocol.task_warnings import FORWARDED_RECORD_ATTRIBUTE

MAX_WARNINGS_PER_TASK = 32
# Longer texts are cut: a warning rides in the control frame with the result.
MAX_WARNING_TEXT = 4096
# How far up the stack to look for the frame that raised a warning (warn's stacklevel is rarely over 5).
_FRAMES_SEARCHED = 32
# Warnings described (category names, module) and kept for the next task that raises them.
_KNOWN_WARNINGS = 256

# (category, text, filename, lineno); the category is a class, or its name for a forwarded record
_WarningKey = tuple[object, str, str, int]


class WarningRecorder:
    def __init__(self) -> None:
        # The task whose code runs now; None outside a task, when warnings go to the worker's stderr.
        self.task_id: int | None = None
        # Records of the running task, moved to `finished` by end_task(): only finished tasks' go out.
        self.current: list[m.TaskWarning] = []
        self.finished: list[m.TaskWarning] = []
        self._seen: set[_WarningKey] = set()
        self._left_out = 0
        self._first_left_out: m.TaskWarning | None = None
        self._stderr_showwarning = warnings.showwarning
        self._module_by_filename: dict[str, str] = {}
        self._known: dict[_WarningKey, m.TaskWarning] = {}

    def install(self) -> None:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        self._stderr_showwarning = warnings.showwarning
        warnings.showwarning = self.showwarning

    def showwarning(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        task_id = self.task_id
        if task_id is None:
            self._stderr_showwarning(message, category, filename, lineno, file, line)
            return
        # A warning of a nested task, issued again inside this one, goes on as it came (category and all).
        forwarded = getattr(message, FORWARDED_RECORD_ATTRIBUTE, None)
        key: _WarningKey
        if isinstance(forwarded, m.TaskWarning):
            key = (forwarded.category, forwarded.message, forwarded.filename, forwarded.lineno)
        else:
            forwarded = None
            text = str(message)
            key = (category, text, filename, lineno)
        if key in self._seen:
            return
        sent = len(self._seen) < MAX_WARNINGS_PER_TASK
        if not sent:
            self._left_out += 1
            if self._first_left_out is not None:
                return
        if forwarded is not None:
            record = dataclasses.replace(forwarded, task_id=task_id)
        else:
            record = self._record(task_id, category, text, filename, lineno)
        if sent:
            self._seen.add(key)
            self.current.append(record)
        else:
            self._first_left_out = record

    def end_task(self) -> None:
        """The running task is over: its records may go out with its result."""
        self.task_id = None
        if self._first_left_out is not None:
            first = self._first_left_out
            self.current.append(m.TaskWarning(
                task_id=first.task_id, category="builtins.RuntimeWarning", category_bases=("builtins.Warning",),
                message=(
                    f"scaler: this task raised {self._left_out} more warning(s) after {MAX_WARNINGS_PER_TASK} "
                    f"distinct ones, the most sent per task; the first left out: {first.category}: "
                    f"{first.message[:200]}"
                ),
                filename=first.filename, lineno=first.lineno, module=first.module,
            ))
        self.finished.extend(self.current)
        self.current = []
        self._seen.clear()
        self._left_out = 0
        self._first_left_out = None

    def _record(self, task_id: int, category: type[Warning], text: str, filename: str, lineno: int) -> m.TaskWarning:
        # Tasks of one function tend to raise the same warnings: describe each once, reuse the description.
        key = (category, text, filename, lineno)
        known = self._known.get(key)
        if known is None:
            if len(self._known) >= _KNOWN_WARNINGS:
                self._known.clear()
            known = self._known[key] = m.TaskWarning(
                task_id=task_id, category=_qualified_name(category), message=_wire_text(text[:MAX_WARNING_TEXT]),
                filename=_wire_text(str(filename)), lineno=lineno if 0 <= lineno < 2**32 else 0,
                category_bases=_base_names(category), module=_wire_text(self._module_of(filename, lineno)),
            )
        return m.TaskWarning(
            task_id, known.category, known.message, known.filename, known.lineno, known.category_bases, known.module
        )

    def take_finished(self) -> list[m.TaskWarning]:
        finished, self.finished = self.finished, []
        return finished

    def _module_of(self, filename: str, lineno: int) -> str:
        """The `__name__` of the code that raised the warning, which warnings.warn matched filters with.

        showwarning is not told; the raising frame is still on the stack (a few frames up, depending on
        the stacklevel), else a loaded module with that file gives it.
        """
        frame: FrameType | None = sys._getframe(1)
        for _ in range(_FRAMES_SEARCHED):
            if frame is None:
                break
            if frame.f_lineno == lineno and frame.f_code.co_filename == filename:
                name = frame.f_globals.get("__name__")
                return name if isinstance(name, str) else ""
            frame = frame.f_back
        known = self._module_by_filename.get(filename)
        if known is None:
            known = self._module_by_filename[filename] = _loaded_module_with_file(filename)
        return known


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _base_names(category: type[Warning]) -> tuple[str, ...]:
    return tuple(_qualified_name(base) for base in category.__mro__[1:] if issubclass(base, Warning))


def _wire_text(text: str) -> str:
    """Cap'n Proto text is UTF-8: a lone surrogate (say, from an undecodable file name) becomes "?"."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _loaded_module_with_file(filename: str) -> str:
    module: Any
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == filename:
            return name
    return ""
