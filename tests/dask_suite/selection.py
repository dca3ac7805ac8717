"""Which of dask's own test modules run through `scaler.get`, and what is left out, each with why.

Measured on the 2-core development machine with dask 2026.8.0, one module per pytest session, while
other work shared the machine; seconds are the module's wall time through scaler.get. The whole
selection must stay at about 3 minutes, so that CI stays well under 15.
"""

from __future__ import annotations

# module (relative to the directory holding the `dask` package) -> fewest graphs it must send through
# scaler.get: about 90% of the count measured (a few tests draw random sizes), so that a run whose
# computes bypassed Scaler cannot pass.
MODULES: dict[str, int] = {
    # required by issue 12
    "dask/tests/test_delayed.py": 75,              # 83 graphs
    "dask/bag/tests/test_bag.py": 345,             # 384 graphs
    "dask/array/tests/test_reductions.py": 4970,   # 5,524 graphs
    # chosen: cheap, and each covers something the three above do not
    "dask/tests/test_base.py": 80,                 # 91 graphs: compute, persist, optimize across collections
    "dask/bag/tests/test_text.py": 80,             # 92 graphs: reading files in tasks, on the workers
    "dask/array/tests/test_atop.py": 80,           # 92 graphs: blockwise graphs, fused by dask before we see them
    "dask/dataframe/tests/test_map.py": 240,       # 270 graphs: dask-expr graphs, pandas objects in task arguments
    "dask/dataframe/tests/test_categorical.py": 180,  # 202 graphs: categoricals, set_index, metadata
}

# Single tests of the chosen modules that are not run.
DESELECTED: dict[str, str] = {
    "dask/tests/test_base.py::test_compute_no_opt":
        "counts computed keys with a dask.callbacks.Callback (pretask); those hooks are called by dask's"
        " local schedulers only (dask.local.get_async), not by scaler.get, nor by dask.distributed",
    "dask/tests/test_base.py::test_num_workers_config[threads]":
        "reads worker ids from dask.diagnostics.Profiler, a dask.callbacks hook of dask's local schedulers",
    "dask/tests/test_base.py::test_num_workers_config[processes]":
        "reads worker ids from dask.diagnostics.Profiler, a dask.callbacks hook of dask's local schedulers",
    "dask/tests/test_base.py::test_get_scheduler":
        "asserts that the named schedulers are dask's own functions, which is what the plugin replaces",
    "dask/tests/test_base.py::test_compute_array_bag":
        "expects arrays and bags to have different default getters; the plugin points both at scaler.get",
    "dask/tests/test_base.py::test_persist_array_bag":
        "expects arrays and bags to have different default getters; the plugin points both at scaler.get",
}

# Modules measured and not chosen, with why (seconds through scaler.get, graphs, failures).
LEFT_OUT: dict[str, str] = {
    "dask/array/tests/test_array_core.py":
        "68 s for 1,840 graphs; its 16 failures are stores into arrays in the test process and"
        " threading locks in graphs (side effects in the parent), and test_memmap then crashes the session"
        " (pytest formats a memmap that the test has closed)",
    "dask/array/tests/test_slicing.py": "106 s (7,871 graphs), no failure",
    "dask/array/tests/test_linalg.py": "156 s (2,415 graphs), no failure",
    "dask/array/tests/test_routines.py": "162 s (2,809 graphs); one failure, a warning raised in a task",
    "dask/array/tests/test_creation.py": "71 s (3,242 graphs), no failure",
    "dask/array/tests/test_random.py": "19 s (1,061 graphs), no failure",
    "dask/array/tests/test_ufunc.py": "22 s (754 graphs); one failure, an np.frompyfunc ufunc cannot be pickled",
    "dask/array/tests/test_masked.py": "21 s (1,024 graphs), no failure",
    "dask/array/tests/test_overlap.py": "19 s (272 graphs), no failure",
    "dask/array/tests/test_gufunc.py": "10 s (115 graphs), no failure",
    "dask/array/tests/test_percentiles.py": "5 s (48 graphs), no failure",
    "dask/bag/tests/test_random.py": "7 s (24 graphs), no failure",
    "dask/tests/test_graph_manipulation.py":
        "13 s for 54 graphs; 9 of its 25 tests count task runs in the test process (side effects in the parent)",
    "dask/dataframe/tests/test_dataframe.py":
        "677 s (3,643 graphs); one failure, test_head_npartitions_warn, a warning raised in a task",
    "dask/dataframe/tests/test_groupby.py": "over 900 s (stopped there); no failure among the 1,000 tests that ran",
    "dask/dataframe/tests/test_multi.py": "600 s, no failure",
    "dask/dataframe/tests/test_shuffle.py":
        "83 s (638 graphs); one failure, test_disk_shuffle_with_unknown_compression: the test sets"
        " dask.config in the test process, which tasks on workers do not see (nor under dask.multiprocessing)",
    "dask/dataframe/tests/test_ufunc.py": "94 s (5,082 graphs), no failure",
    "dask/dataframe/tests/test_rolling.py": "82 s, no failure",
    "dask/dataframe/tests/test_arithmetics_reduction.py": "204 s, no failure",
    "dask/dataframe/tests/test_reshape.py": "15 s (77 graphs), no failure",
    "dask/dataframe/tests/test_indexing.py": "16 s, no failure",
    "dask/dataframe/tests/test_accessors.py": "9 s (97 graphs), no failure",
}
