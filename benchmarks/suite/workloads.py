"""What every peer runs, and how a runner measures and reports it.

Standard library only (psutil is used when present): the runner of the original Scaler 1.9.9 imports
this module from its own virtual environment, and worker processes of every peer import it by name
(the suite puts this folder on PYTHONPATH), so the task functions below are pickled by reference.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import operator
import os
import random
import statistics
import sys
import time
import traceback
from typing import Any, Callable

# ---------------------------------------------------------------------------------------------- tasks


def noop(value: Any) -> Any:
    """The no-op task: returns its argument."""
    return value


def call(function: Callable[..., Any], *arguments: Any) -> Any:
    """Apply a graph node's function, for peers that run graph nodes as plain remote calls (Ray)."""
    return function(*arguments)


def cpu_work(iterations: int) -> int:
    """Pure-Python CPU work, holding the GIL throughout; the suite calibrates `iterations` to 20 ms."""
    total = 0
    for index in range(iterations):
        total += index * index % 7
    return total


def payload_size(payload: bytes) -> int:
    """Touches nothing but the length: the figure is the cost of moving the argument."""
    return len(payload)


def calibrate_cpu_work(target_seconds: float) -> tuple[int, float]:
    """Iterations of `cpu_work` that take about `target_seconds` here, and what they measured (median)."""
    iterations = 20_000
    while True:
        elapsed = _time_cpu_work(iterations)
        if elapsed > target_seconds / 4:
            break
        iterations *= 2
    iterations = max(1, int(iterations * target_seconds / elapsed))
    return iterations, statistics.median(_time_cpu_work(iterations) for _ in range(7))


def _time_cpu_work(iterations: int) -> float:
    started = time.perf_counter()
    cpu_work(iterations)
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------- graph


def tree_graph(nodes: int) -> tuple[dict, str, int]:
    """A tree reduction of about `nodes` task nodes in dask's dict format.

    Leaves are `(operator.pos, i)` with a literal argument; each inner node adds two nodes of the
    level below. Returns the graph, the root key and the expected result. All task nodes: 2 * leaves - 1.
    """
    leaves = max(1, (nodes + 1) // 2)
    graph: dict[str, tuple] = {}
    level = []
    for index in range(leaves):
        key = f"leaf-{index}"
        graph[key] = (operator.pos, index)
        level.append(key)
    depth = 0
    while len(level) > 1:
        depth += 1
        next_level = []
        for position in range(0, len(level) - 1, 2):
            key = f"sum-{depth}-{position // 2}"
            graph[key] = (operator.add, level[position], level[position + 1])
            next_level.append(key)
        if len(level) % 2:
            next_level.append(level[-1])
        level = next_level
    return graph, level[0], leaves * (leaves - 1) // 2


def tree_graph_with_data_keys(nodes: int) -> tuple[dict, str, int]:
    """The same tree for clients whose graphs take keys only as arguments: literals become data keys."""
    graph, root, expected = tree_graph(nodes)
    converted: dict[str, Any] = {}
    for key, value in graph.items():
        if key.startswith("leaf-"):
            function, literal = value
            converted[f"data-{key}"] = literal
            converted[key] = (function, f"data-{key}")
        else:
            converted[key] = value
    return converted, root, expected


def task_node_count(graph: dict) -> int:
    return sum(1 for value in graph.values() if isinstance(value, tuple) and value and callable(value[0]))


def distinct_payloads(count: int, size: int, first: int = 0) -> list[bytes]:
    """`count` different incompressible buffers of `size` bytes, so no peer can deduplicate or compress them
    (numbered from `first`: buffers of different rounds differ too)."""
    base = random.Random(8).randbytes(size)
    return [index.to_bytes(8, "little") + base[8:] for index in range(first, first + count)]


# ---------------------------------------------------------------------------------------------- timing


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def rate(count: int, seconds: float) -> dict:
    return {"count": count, "seconds": seconds, "rate": count / seconds}


def round_trip_figures(samples: list[float]) -> dict:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    return {"count": len(samples), "median_ms": statistics.median(ordered) * 1e3, "p99_ms": p99 * 1e3}


def round_trips(call: Callable[[int], object], count: int) -> dict:
    samples = []
    for index in range(count):
        started = time.perf_counter()
        call(index)
        samples.append(time.perf_counter() - started)
    return round_trip_figures(samples)


# The three workloads below take how a peer starts one call, `start(function, argument) -> handle`, and
# how it waits for one, `collect(handle) -> value`: a future and its result(), a Ray ObjectRef and ray.get.


def submit_loop(start: Callable[[Callable, Any], Any], collect: Callable[[Any], Any], count: int) -> dict:
    """`count` no-op calls started one by one, then each result collected: tasks/s."""

    def submit_all() -> None:
        handles = [start(noop, index) for index in range(count)]
        assert [collect(handle) for handle in handles][-1] == count - 1

    return rate(count, timed(submit_all))


def sequential_round_trips(start: Callable[[Callable, Any], Any], collect: Callable[[Any], Any], count: int) -> dict:
    return round_trips(lambda index: collect(start(noop, index)), count)


# Rounds of the large-argument workload after the first: their median is the steady figure (as for
# dask.array): the first round also pays for what a peer pays once, such as a store's first segments.
STEADY_LARGE_ROUNDS = 3


def large_arguments(start: Callable[[Callable, Any], Any], collect: Callable[[Any], Any], spec: dict) -> dict:
    """The spec's large payloads, each the argument of one call that only reads its length: MB/s of the first
    round ("first_mb_per_s") and the median of `STEADY_LARGE_ROUNDS` more ("mb_per_s"), every round with
    payloads of its own."""
    count, size = spec["large_count"], spec["large_bytes"]
    seconds: list[float] = []

    def send_all(payloads: list[bytes]) -> None:
        handles = [start(payload_size, payload) for payload in payloads]
        assert all(collect(handle) == size for handle in handles)

    for round_index in range(1 + STEADY_LARGE_ROUNDS):
        payloads = distinct_payloads(count, size, first=round_index * count)
        seconds.append(timed(functools.partial(send_all, payloads)))
        payloads = []  # freed before the next round's: two rounds at once would need twice the memory
    steady = transfer(count, size, statistics.median(seconds[1:]))
    return {**steady, "first_mb_per_s": transfer(count, size, seconds[0])["mb_per_s"],
            "rounds_seconds": seconds}


def result_of(future: Any) -> Any:
    """`collect` for every peer whose calls return futures."""
    return future.result()


def cpu_efficiency(spec: dict, run_all: Callable[[], object]) -> dict:
    """Time `run_all` (the spec's CPU tasks on the workers) against the ideal: tasks x task time / workers.

    The task time is measured here, in this process, just before: the same interpreter and the same
    machine load as the run, so that the ratio shows the framework's overhead and nothing else.
    """
    task_seconds = statistics.median(_time_cpu_work(spec["cpu_iterations"]) for _ in range(5))
    bare_seconds = bare_processes_seconds(spec["cpu_iterations"], spec["cpu_tasks"], spec["workers"])
    wall_seconds = timed(run_all)
    ideal = spec["cpu_tasks"] * task_seconds / spec["workers"]
    return {
        "count": spec["cpu_tasks"], "task_seconds": task_seconds, "seconds": wall_seconds, "ideal_seconds": ideal,
        "wall_over_ideal": wall_seconds / ideal, "efficiency": ideal / wall_seconds,
        "bare_seconds": bare_seconds, "wall_over_bare": wall_seconds / bare_seconds,
    }


def bare_processes_seconds(iterations: int, tasks: int, workers: int) -> float:
    """The same tasks split over `workers` plain forked processes, no framework: what the machine allows.

    On a virtual machine two busy vCPUs often run slower than one (shared physical cores, host load),
    so "wall / ideal" mixes the framework's overhead with the machine's; "wall / bare" is the
    framework's alone. The processes are forked and waiting before the clock starts.
    """
    import multiprocessing

    context = multiprocessing.get_context("fork")
    start = context.Event()
    shares = [tasks // workers + (1 if index < tasks % workers else 0) for index in range(workers)]
    processes = [context.Process(target=_bare_share, args=(start, iterations, share)) for share in shares]
    for process in processes:
        process.start()
    try:
        started = time.perf_counter()
        start.set()
        for process in processes:
            process.join(timeout=600)
        return time.perf_counter() - started
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()


def _bare_share(start: Any, iterations: int, count: int) -> None:
    start.wait()
    for _ in range(count):
        cpu_work(iterations)


def transfer(count: int, size: int, seconds: float) -> dict:
    return {"count": count, "seconds": seconds, "mb_per_s": count * size / 2**20 / seconds}


# ---------------------------------------------------------------------------------------------- memory


def peak_rss_mb(pids: list[int]) -> float:
    """Sum over the processes of each one's peak resident set (VmHWM), or its current RSS off Linux."""
    total_kb = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        total_kb += int(line.split()[1])
                        break
        except OSError:
            total_kb += int(current_rss_mb([pid]) * 1024)
    return total_kb / 1024


def current_rss_mb(pids: list[int]) -> float:
    try:
        import psutil
    except ImportError:
        return math.nan
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def descendants(pid: int) -> list[int]:
    try:
        import psutil
    except ImportError:
        return []
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def process_memory(scheduler_pids: list[int], worker_pids: list[int], note: str = "") -> dict:
    figures = {
        "scheduler_peak_mb": peak_rss_mb(scheduler_pids) if scheduler_pids else None,
        "workers_peak_mb": peak_rss_mb(worker_pids),
        "worker_processes": len(worker_pids),
    }
    if note:
        figures["note"] = note
    return figures


# ---------------------------------------------------------------------------------------------- runner


class Runner:
    """One peer's run: reads the spec, runs the requested workloads, writes what each measured.

    A workload that raises is reported as an error and the others still run. Results are written
    after every workload, so a run killed by the suite's timeout keeps what it finished.
    """

    def __init__(self, peer: str) -> None:
        parser = argparse.ArgumentParser()
        parser.add_argument("--spec", required=True, help="JSON: workers, counts and workloads to run")
        parser.add_argument("--output", required=True)
        args = parser.parse_args()
        self.spec: dict = json.loads(args.spec)
        self.peer = peer
        self._output = args.output
        self.results: dict[str, Any] = {"peer": peer, "python": sys.version.split()[0], "workloads": {}, "notes": []}

    @property
    def workers(self) -> int:
        return int(self.spec["workers"])

    def wants(self, workload: str) -> bool:
        return workload in self.spec["workloads"]

    def count(self, workload: str) -> int:
        return int(self.spec["counts"][workload])

    def note(self, text: str) -> None:
        self.results["notes"].append(text)
        self._write()

    def record(self, workload: str, figures: dict) -> None:
        self.results["workloads"][workload] = figures
        self._write()

    def run(self, workload: str, measure: Callable[[], dict | None], asked_as: str = "") -> None:
        """Run one workload if it (or `asked_as`) was asked for; `measure` returns its figures."""
        if not self.wants(asked_as or workload):
            return
        try:
            figures = measure()
        except Exception as error:  # noqa: BLE001 - one failing workload must not hide the others
            traceback.print_exc()
            self.record(workload, {"error": f"{type(error).__name__}: {error}"[:300]})
            return
        if figures is not None:
            self.record(workload, figures)
        print(f"[{self.peer}] {workload}: {figures}", file=sys.stderr, flush=True)

    def _write(self) -> None:
        temporary = self._output + ".tmp"
        with open(temporary, "w") as file:
            json.dump(self.results, file, indent=1)
        os.replace(temporary, self._output)
