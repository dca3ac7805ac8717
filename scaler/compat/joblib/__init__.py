"""joblib on Scaler: the parallel backend "scaler".

    import scaler                                     # or: import scaler.compat.joblib
    with joblib.parallel_config(backend="scaler"):    # was: backend="loky"
        results = joblib.Parallel()(joblib.delayed(work)(item) for item in items)

Importing this package registers the backend with joblib. The cluster is chosen as for every
adapter (see scaler/compat/cluster_choice.py); `ScalerBackend` documents how `n_jobs` is read.

joblib, and numpy with it, takes a tenth of a second and some megabytes to import, and every
scheduler, worker and processor imports scaler. So when joblib is not imported yet, registering
waits for it: a one-shot import hook registers the backend as soon as joblib has been imported,
before anyone can ask joblib for it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import warnings
from types import ModuleType
from typing import Any, Sequence

if importlib.util.find_spec("joblib") is None:
    raise ImportError("the Scaler joblib backend needs joblib: pip install 'scaler[joblib]'")

__all__ = ["ScalerBackend", "register"]

_hook_lock = threading.Lock()


def register() -> None:
    """Register the "scaler" backend with joblib now (importing joblib). Importing this package already does."""
    from scaler.compat.joblib import backend

    backend.register()


def __getattr__(name: str) -> Any:
    # The backend class imports joblib: only when someone asks for it.
    if name == "ScalerBackend":
        from scaler.compat.joblib.backend import ScalerBackend

        return ScalerBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _RegisterWhenJoblibIsImported:
    """Finds nothing itself: it lets the other finders find joblib, and registers once joblib has run.

    A meta path finder needs only `find_spec`; it does not subclass importlib.abc.MetaPathFinder, whose
    module imports importlib.resources and tempfile: a tenth of every scaler process's start-up imports."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "joblib":
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        execute = getattr(loader, "exec_module", None)
        if execute is None:
            return spec

        def execute_then_register(module: ModuleType) -> None:
            execute(module)
            _remove_hook()
            try:
                # The backend registers itself when its module has run. If that module is the one
                # importing joblib right now, this returns it half-run, and it registers on finishing.
                importlib.import_module("scaler.compat.joblib.backend")
            except Exception as error:  # never break `import joblib` for the user
                warnings.warn(f"could not register the Scaler joblib backend: {error!r}", stacklevel=2)

        # On this spec's own loader object only: find_spec may be called without importing (as
        # importlib.util.find_spec does), so the hook stays until a real import has run.
        loader.exec_module = execute_then_register  # type: ignore[union-attr]
        return spec


_hook = _RegisterWhenJoblibIsImported()


def _remove_hook() -> None:
    with _hook_lock:
        if _hook in sys.meta_path:
            sys.meta_path.remove(_hook)


if "joblib" in sys.modules:
    register()
else:
    with _hook_lock:
        if _hook not in sys.meta_path:
            sys.meta_path.insert(0, _hook)
