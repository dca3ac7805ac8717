"""dask's own tests that fail with every compute on `scaler.get`, each with the reason.

tests/integration/test_dask_suite.py checks that exactly these fail, and that each one also fails, in
the same run, with every compute on `dask.multiprocessing.get`: they expect what only a scheduler
running tasks in the calling process gives. Any other failure is a bug in scaler/compat/dask/ or in
Scaler. Keys are pytest node ids relative to the directory holding the `dask` package.
"""

from __future__ import annotations

EXPECTED_FAILURES: dict[str, str] = {
    "dask/tests/test_delayed.py::test_traverse_false":
        "object identity: asserts the computed list holds the very Delayed object it put in (`res[0] is a`);"
        " a result computed elsewhere is a copy",
    "dask/bag/tests/test_bag.py::test_bag_with_single_callable":
        "object identity: compares a bag of one lambda with `[f]`; functions compare by identity and the"
        " result holds a copy of the lambda",
    "dask/bag/tests/test_bag.py::test_repartition_partition_size_complex_dtypes":
        "object identity: `assert_eq` compares two bags of numpy arrays with list `==`, which passes only"
        " when both hold the same array objects (`is` short-cuts the element-wise `==` that then raises)",
    "dask/bag/tests/test_bag.py::test_to_delayed_optimize_graph":
        "side effect counted in the parent: a monkeypatched `reify` increments a counter in the test"
        " process; it runs, and counts, in a worker",
    "dask/bag/tests/test_bag.py::test_reductions_are_lazy":
        "a generator in the graph: the bag's partition is a live generator object, which cannot be"
        " pickled to another process",
    "dask/array/tests/test_reductions.py::test_nanquantile_all_nan":
        "dask's own pytest configuration (`filterwarnings = error`, not installed with the package) turns"
        " an all-NaN RuntimeWarning into the exception the test expects; fails under every scheduler here,"
        " dask's synchronous one included",
}
