"""Every error of scaler.errors survives pickling, also where dask.multiprocessing or distributed has
installed tblib's exception pickler (which rebuilds an exception with `cls.__new__(cls, ...)`): a task's
failure reaches the client pickled, and users of Scaler often have dask imported."""

from __future__ import annotations

import copyreg
import inspect
import pickle
from typing import Iterator

import pytest
from tblib import pickling_support

import scaler.errors

ERRORS = [
    error for _, error in inspect.getmembers(scaler.errors, inspect.isclass)
    if issubclass(error, BaseException) and error.__module__ == scaler.errors.__name__
]


@pytest.fixture
def tblib_installed() -> Iterator[None]:
    before = dict(copyreg.dispatch_table)
    pickling_support.install(*ERRORS)  # as dask.multiprocessing's import does for every exception class
    yield
    copyreg.dispatch_table.clear()
    copyreg.dispatch_table.update(before)


# The constructor arguments of the errors that take more than a message.
ARGUMENTS: dict[type, tuple] = {scaler.errors.RemoteTaskError: ("numpy.linalg.LinAlgError", "Singular matrix")}


@pytest.mark.parametrize("error_class", ERRORS, ids=[error.__name__ for error in ERRORS])
def test_an_error_round_trips_through_tblibs_pickler(tblib_installed: None, error_class: type) -> None:
    error = error_class(*ARGUMENTS.get(error_class, ("what went wrong",)))
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is error_class and str(copy) == str(error)
