"""joblib's own tests (joblib/test/test_parallel.py) that fail on the "scaler" backend, each with why.

Each reason is a difference of environment, not a Scaler bug; a Scaler bug is fixed instead, with
a test of its own. tests/integration/test_joblib_suite.py fails when any other test fails, and also
when one of these passes (then it leaves this list).
"""

from __future__ import annotations

_LOKY_WORKERS_NEVER_IMPORTED_SCALER = (
    "the inner Parallel(backend='scaler') runs in a loky worker: a new interpreter in which nothing "
    "imported scaler, and joblib registers no backend there but its own and dask's, so joblib raises "
    "ValueError: Invalid backend: scaler. Nothing public reaches those workers from outside the call; "
    "the README gives the two ways a user does it (loky's initializer, or register() in the function), "
    "and test_joblib_backend.py::test_scaler_inside_loky_workers_needs_registering_there runs both"
)

EXPECTED_FAILURES: dict[str, str] = {
    "test_nested_loop[loky-scaler]": _LOKY_WORKERS_NEVER_IMPORTED_SCALER,
    # joblib's test module registers "back_compat_backend", a LokyBackend subclass: the same loky workers.
    "test_nested_loop[back_compat_backend-scaler]": _LOKY_WORKERS_NEVER_IMPORTED_SCALER,
}
