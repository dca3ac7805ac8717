"""Issuing again, in the caller, the warnings a task raised on its worker.

The worker records every warning a task raises, unfiltered (scaler/worker/warning_recorder.py). Here
each one goes through `warnings.warn_explicit` with the task's category, text and location, in the
thread that is handed the task's outcome, so the caller's filters decide: `catch_warnings(record=True)`
and `pytest.warns` see it, "ignore" drops it, "error" raises it from `result()` (or `map`, `get`), and
the "default" action shows it once per location, keeping its registry in the raising module as
`warnings.warn` does.

A category the client cannot find among its loaded modules (a class local to a function, or from a
library the client never imported) is replaced by its nearest base class it can find, usually a
built-in one, and the text then starts with the original category's name. Modules are never imported
for this.

It lives with the protocol, below the client and the worker, because both use it: the client issues the
records of its tasks, and a worker's processor passes on unchanged those of its nested tasks.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Iterable

from scaler.protocol import messages as m

# Each issued warning carries its record under this name, so that a worker's processor issuing a nested
# task's warning inside its own task passes it on unchanged (scaler/worker/warning_recorder.py).
FORWARDED_RECORD_ATTRIBUTE = "_scaler_task_warning"

# Registries of the "default" and "module" actions for modules this process has not loaded.
_registries_of_unloaded_modules: dict[str, dict[Any, Any]] = {}


def issue_task_warnings(records: Iterable[m.TaskWarning]) -> None:
    """Issue each record as a warning raised at its place in the task; the caller's filters apply."""
    for record in records:
        warning = _rebuilt(record)
        setattr(warning, FORWARDED_RECORD_ATTRIBUTE, record)
        module = sys.modules.get(record.module) if record.module else None
        if module is not None:
            registry = vars(module).setdefault("__warningregistry__", {})
        else:
            registry = _registries_of_unloaded_modules.setdefault(record.module or record.filename, {})
        # No module_globals: this process's module of that name need not be the task's (say, __main__).
        # An unknown module is left out, not None (which the C implementation does not read as missing):
        # warn_explicit then names it after the file, as warnings.warn does for code without __name__.
        if record.module:
            warnings.warn_explicit(
                warning, type(warning), record.filename, record.lineno, module=record.module, registry=registry
            )
        else:
            warnings.warn_explicit(warning, type(warning), record.filename, record.lineno, registry=registry)


def _rebuilt(record: m.TaskWarning) -> Warning:
    """The warning object: of the task's category if it is known here, else of its nearest known base."""
    for name in (record.category, *record.category_bases):
        category = _loaded_class(name)
        if category is None:
            continue
        text = record.message if name == record.category else f"{record.category}: {record.message}"
        try:
            return category(text)
        except Exception:  # a category whose constructor wants other arguments: try a base
            continue
    return UserWarning(f"{record.category}: {record.message}")


def _loaded_class(qualified_name: str) -> type[Warning] | None:
    """The warning class named "module.QualName", if that module is loaded; None otherwise."""
    module_name, _, qualname = qualified_name.rpartition(".")
    found: Any = None
    # The qualname may hold dots itself (a nested class): try each split of the name, longest module first.
    while module_name:
        module = sys.modules.get(module_name)
        if module is not None:
            found = module
            for part in qualname.split("."):
                found = getattr(found, part, None)
                if found is None:
                    break
            if isinstance(found, type) and issubclass(found, Warning):
                return found
        module_name, _, head = module_name.rpartition(".")
        qualname = f"{head}.{qualname}"
    return None
