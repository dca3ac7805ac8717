"""dask's single-machine schedulers: threads (dask.threaded.get) or processes (dask.multiprocessing.get).

The spec's "variant" says which. The process pool is started and warmed up before the clock and
handed to dask, which would otherwise start one inside the timed call.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing

from workloads import Runner, rate, task_node_count, timed, tree_graph


def main() -> None:
    runner = Runner("dask")
    variant = runner.spec["variant"]
    runner.peer = runner.results["peer"] = f"dask.{'threaded' if variant == 'threads' else 'multiprocessing'}"
    import dask
    import dask.multiprocessing
    import dask.threaded
    import dask_array_workload

    pool = None
    if variant == "threads":
        options: dict = {"num_workers": runner.workers}
        get = dask.threaded.get
    else:
        pool = concurrent.futures.ProcessPoolExecutor(runner.workers, mp_context=multiprocessing.get_context("spawn"))
        options = {"pool": pool}
        get = dask.multiprocessing.get
    try:
        small, root, expected = tree_graph(100)
        assert get(small, root, **options) == expected
        dask_array_workload.run(variant, runner.spec, warm_up=True, **options)

        def run_graph() -> dict:
            graph, root, expected = tree_graph(runner.count("graph"))
            outcome: list = []
            seconds = timed(lambda: outcome.append(get(graph, root, **options)))
            assert outcome[0] == expected, outcome
            return rate(task_node_count(graph), seconds)

        runner.run("graph", run_graph)
        runner.run("dask_array", lambda: dask_array_workload.run(variant, runner.spec, **options))
    finally:
        if pool is not None:
            pool.shutdown()
        dask.config.refresh()


if __name__ == "__main__":
    main()
