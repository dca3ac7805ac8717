"""Compute a dask array on Scaler: the same answer as dask's own schedulers, with one argument changed.

Needs dask.array (dask and numpy): pip install "scaler[examples]"
"""

import dask
import dask.array as da

import scaler
from scaler import SchedulerClusterCombo
from scaler.compat.dask import use


def main() -> None:
    x = da.random.default_rng(42).random((2000, 2000), chunks=(500, 500))
    expression = (x + x.T).mean(axis=0)[:5]

    # With no cluster chosen, scaler.get starts an embedded one (one worker per core) on first use.
    # Here we choose one: a scheduler and two workers on this machine.
    with SchedulerClusterCombo(n_workers=2) as cluster, use(cluster.get_address()):
        on_scaler = expression.compute(scheduler=scaler.get)
        (total,) = dask.compute(x.sum(), scheduler=scaler.get)
        with dask.config.set(scheduler=scaler.get):  # every compute in the block
            largest = x.max().compute()

    on_threads = expression.compute(scheduler="threads")
    print(on_scaler.round(6).tolist())
    print("same as dask.threaded:", bool((on_scaler == on_threads).all()))
    print("sum:", round(float(total), 3), "matches:", bool(abs(total - x.sum().compute(scheduler="sync")) < 1e-6))
    print("max below 1:", bool(largest < 1))


if __name__ == "__main__":
    main()
