"""`Client.gather`: the values of futures nested in lists, tuples, sets and dicts, in the same shape."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from scaler.compat.dask.distributed.future import ERROR, Future
from scaler.utility.blocking import waiting_for_tasks

_SKIPPED = object()


def gathered(item: Any, skip_errors: bool) -> Any:
    """Wait for every future in `item`, then its values in its shape; a failed future raises its error, or
    with `skip_errors` is left out of its list (or dict)."""
    outcomes: list[concurrent.futures.Future] = []
    _outcomes_in(item, outcomes)
    with waiting_for_tasks():
        concurrent.futures.wait(outcomes)
    packed = _packed(item, skip_errors)
    return None if packed is _SKIPPED else packed


def _outcomes_in(item: Any, outcomes: list[concurrent.futures.Future]) -> None:
    if isinstance(item, Future):
        outcomes.append(item._state.outcome)
    elif isinstance(item, dict):
        for value in item.values():
            _outcomes_in(value, outcomes)
    elif isinstance(item, (list, tuple, set, frozenset)):
        for value in item:
            _outcomes_in(value, outcomes)


def _packed(item: Any, skip_errors: bool) -> Any:
    if isinstance(item, Future):
        if skip_errors and item.status == ERROR:
            return _SKIPPED
        return item._result()
    if isinstance(item, dict):
        values = {key: _packed(value, skip_errors) for key, value in item.items()}
        return type(item)((key, value) for key, value in values.items() if value is not _SKIPPED)
    if isinstance(item, (list, tuple, set, frozenset)):
        return type(item)(value for value in (_packed(value, skip_errors) for value in item) if value is not _SKIPPED)
    return item
