"""Issue 15's data-plane workload: a dask.array graph with gigabytes of intermediates on two simulated hosts.

    sudo python benchmarks/two_hosts.py [--size 16384] [--chunk 2048] [--repeats 3] [--peers scaler,dask]
                                        [--json PATH]

`(x + x.T).mean(axis=0).sum()`, x = size x size random float64 generated inside the tasks (16384: 2.1 GB
of chunks, each read by two tasks, one of them usually on the other host), computed through
`scaler.get` on Scaler and through a `distributed.Client` on dask.distributed.

The machine is split with network namespaces (root needed): the scheduler in one, host A and host B in
one each (one worker process of one thread on each, and on Scaler the store each Cluster starts), all
on one bridge, with the client in the root namespace. So nothing but the network joins the hosts: their
stores have different host keys and pull from each other over TCP. Each peer's scheduler and workers
are started once and warmed up before the clock; the runs of one peer follow each other.

Printed per peer (medians over the repeats): seconds, MB/s (x's bytes / seconds, MB = 10^6 bytes), the
scheduler's peak RSS (VmHWM), the bytes that crossed the hosts' links (what the work moved), the bytes
through the scheduler's own link and, on Scaler, the bytes it relayed (monitor feed). Then the ratios
and the issue's targets, and the load average before and after. `--json PATH` writes the same figures
(every run's and the medians) for benchmarks/run.py, which runs this script as its workload "two_hosts".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from simulated_hosts import Termination  # noqa: E402
from simulated_hosts import ip as _ip  # noqa: E402

MB = 10**6
SCHEDULER_PORT = 24567
DASK_PORT = 24568
_PREFIX = "sc2h"
START_SECONDS = 120.0


# ------------------------------------------------------------------------------------------ the network


class Network:
    """A bridge in a namespace of its own; the scheduler's namespace, hosts A and B and the root namespace on it."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(2)
        used = set(re.findall(r"10\.215\.(\d+)\.", _ip("-4", "route", "show", "table", "all").stdout))
        self.subnet = f"10.215.{next(x for x in range(1, 255) if str(x) not in used)}"
        self.namespaces: list[str] = []
        self.root_link = ""
        self.links: dict[str, str] = {}  # namespace -> its link to the bridge

    def netns(self, role: str) -> str:
        return f"{_PREFIX}-{self.tag}-{role}"

    def build(self) -> None:
        switch = self._add("sw")
        _ip("link", "add", "br0", "type", "bridge", netns=switch)
        _ip("link", "set", "br0", "up", netns=switch)
        for role, host_number in (("s", 1), ("a", 11), ("b", 12), ("root", 254)):
            netns = None if role == "root" else self._add(role)
            outside = f"{_PREFIX}{self.tag}{role}"
            _ip("link", "add", outside, *(["netns", netns] if netns else []),
                "type", "veth", "peer", "name", f"{outside}p", "netns", switch)
            if netns is None:
                self.root_link = outside
            _ip("link", "set", f"{outside}p", "master", "br0", netns=switch)
            _ip("link", "set", f"{outside}p", "up", netns=switch)
            _ip("addr", "add", f"{self.subnet}.{host_number}/24", "dev", outside, netns=netns)
            _ip("link", "set", outside, "up", netns=netns)
            self.links[role] = outside

    def _add(self, role: str) -> str:
        name = self.netns(role)
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("link", "set", "lo", "up", netns=name)
        return name

    def address(self, role: str) -> str:
        return f"{self.subnet}.{ {'s': 1, 'a': 11, 'b': 12}[role] }"

    def link_bytes(self, role: str) -> int:
        """Bytes received plus sent on a namespace's link to the bridge so far."""
        shown = json.loads(_ip("-j", "-s", "link", "show", "dev", self.links[role], netns=self.netns(role)).stdout)
        stats = shown[0]["stats64"]
        return int(stats["rx"]["bytes"]) + int(stats["tx"]["bytes"])

    def close(self) -> None:
        for netns in self.namespaces:
            for pid in _ip("netns", "pids", netns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", netns, check=False)
        if self.root_link:
            _ip("link", "del", self.root_link, check=False)


# ------------------------------------------------------------------------------------------ processes


class Processes:
    def __init__(self, network: Network, directory: str) -> None:
        self.network = network
        self.directory = directory
        self.started: list[subprocess.Popen] = []

    def spawn(self, role: str, name: str, *command: str) -> subprocess.Popen:
        log = open(os.path.join(self.directory, f"{name}.log"), "w")
        process = subprocess.Popen(["ip", "netns", "exec", self.network.netns(role), *command],
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        log.close()
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.started):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in reversed(self.started):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.started.clear()


def peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


# ------------------------------------------------------------------------------------------ the work


def compute(get: Any, workload: str, size: int, chunk: int) -> float:
    import dask
    import dask.array as da

    x = da.random.default_rng(42).random((size, size), chunks=(chunk, chunk))
    if workload == "transpose":
        expression = (x + x.T).mean(axis=0).sum()
        expected = size  # E[x + x.T] = 1: the column means are about 1
    else:
        # Blocks into column strips: every strip takes a slice of each block of its column (all to all).
        expression = x.rechunk((size, max(1, chunk // 8))).mean(axis=0).sum()
        expected = size / 2
    with dask.config.set({"array.rechunk.method": "tasks"}):  # the same graph for every peer
        value = float(expression.compute(scheduler=get))
    assert abs(value - expected) < expected * 0.01, value
    return value


def measure(
    network: Network, scheduler_pid: int, get: Any, args: argparse.Namespace, relayed: Callable[[], int] | None,
) -> list[dict]:
    """Each run's figures; `relayed` reads the bytes the scheduler relayed so far, where the peer counts them."""
    workload, size, chunk = args.workload, args.size, args.chunk
    compute(get, workload, 1024, 256)  # warm-up: workers connected, code imported
    runs = []
    for _ in range(args.repeats):
        links_before = {role: network.link_bytes(role) for role in ("s", "a", "b")}
        relayed_before = relayed() if relayed else 0
        started = time.perf_counter()
        compute(get, workload, size, chunk)
        seconds = time.perf_counter() - started
        links = {role: network.link_bytes(role) - links_before[role] for role in ("s", "a", "b")}
        figures = {
            "seconds": seconds,
            "mb_per_s": size * size * 8 / MB / seconds,
            "scheduler_peak_rss_mb": peak_rss_bytes(scheduler_pid) / MB,
            # What left or reached the hosts; traffic between them counts on both links: halved.
            "across_hosts_mb": (links["a"] + links["b"]) / 2 / MB,
            "scheduler_link_mb": links["s"] / MB,
            "moved_mb": moved_mb(size),
        }
        if relayed:
            figures["relayed_mb"] = (relayed() - relayed_before) / MB
        runs.append(figures)
    return runs


def moved_mb(size: int) -> float:
    """What the work moves at least: every byte of x goes from the task that made it to another (transpose:
    to two, (i, j) and (j, i); rechunk: through a slice into a strip), so x's bytes are a lower bound."""
    return size * size * 8 / MB


def wait_for_port(network: Network, role: str, port: int) -> None:
    import socket

    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        try:
            socket.create_connection((network.address(role), port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on {network.address(role)}:{port} after {START_SECONDS:g}s")


def run_scaler(network: Network, processes: Processes, args: argparse.Namespace) -> list[dict]:
    from scaler import Client
    from scaler.compat import dask as scaler_dask
    from scaler.ui.feed import MonitorSubscriber

    address = f"tcp://{network.address('s')}:{SCHEDULER_PORT}"
    monitor_address = f"ipc://{processes.directory}/monitor"
    scheduler = processes.spawn("s", "scaler-scheduler", sys.executable, "-m", "scaler.cli.scheduler",
                                "--monitor-address", monitor_address, address)
    wait_for_port(network, "s", SCHEDULER_PORT)
    for role in ("a", "b"):
        processes.spawn(role, f"scaler-cluster-{role}", sys.executable, "-m", "scaler.cli.cluster",
                        "--num-of-workers", "1", "--worker-names", f"host-{role}", address)
    with MonitorSubscriber(monitor_address) as monitor:
        deadline = time.monotonic() + START_SECONDS
        latest: list[Any] = [None]
        while latest[0] is None or len(latest[0].workers) < 2 or len(latest[0].stores) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the two Scaler hosts did not register in time")
            latest[0] = monitor.receive(timeout_seconds=1) or latest[0]

        def relayed() -> int:
            while True:  # the newest snapshot published so far
                snapshot = monitor.receive(timeout_seconds=0.05)
                if snapshot is None:
                    return latest[0].bytes_relayed
                latest[0] = snapshot

        with Client(address=address, timeout_seconds=60) as client, scaler_dask.use(client):
            host_keys = {entry.host_key for entry in client._connection.stores._addresses.values()}
            assert len(host_keys) == 2, f"the two stores share a host key: {host_keys}"
            runs = measure(network, scheduler.pid, scaler_dask.get, args, relayed)
            relayed()
            print("scaler: tasks per host", {worker.name: worker.sent for worker in latest[0].workers}, flush=True)
            return runs


def run_dask(network: Network, processes: Processes, args: argparse.Namespace) -> list[dict]:
    import distributed

    scheduler = processes.spawn("s", "dask-scheduler", sys.executable, "-m", "distributed.cli.dask_scheduler",
                                "--host", network.address("s"), "--port", str(DASK_PORT), "--no-dashboard")
    wait_for_port(network, "s", DASK_PORT)
    address = f"tcp://{network.address('s')}:{DASK_PORT}"
    for role in ("a", "b"):
        processes.spawn(role, f"dask-worker-{role}", sys.executable, "-m", "distributed.cli.dask_worker", address,
                        "--nworkers", "1", "--nthreads", "1", "--host", network.address(role), "--no-dashboard",
                        "--local-directory", processes.directory)
    with distributed.Client(address, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=START_SECONDS)
        return measure(network, scheduler.pid, client.get, args, None)  # no count of relayed bytes


PEERS: dict[str, Callable[[Network, Processes, argparse.Namespace], list[dict]]] = {
    "scaler": run_scaler, "dask": run_dask,
}


# ------------------------------------------------------------------------------------------ report


def median(runs: list[dict], figure: str) -> float:
    return statistics.median(run[figure] for run in runs)


def medians(runs: list[dict]) -> dict:
    return {figure: median(runs, figure) for figure in runs[0]} if runs else {}


def expression_text(args: argparse.Namespace) -> str:
    if args.workload == "transpose":
        return "(x + x.T).mean(axis=0).sum()"
    return f"x.rechunk(({args.size}, {max(1, args.chunk // 8)})).mean(axis=0).sum()"


def report(results: dict[str, list[dict]], args: argparse.Namespace, load: tuple[tuple, tuple]) -> None:
    x_mb = moved_mb(args.size)
    print(f"\n{expression_text(args)}, x {args.size}x{args.size} float64 in {args.chunk}x{args.chunk} chunks "
          f"({x_mb / 1000:.2f} GB of intermediates in x), 2 hosts x 1 worker; "
          f"median of {args.repeats}")
    figures = [("seconds", "s", "{:.2f}"), ("mb_per_s", "MB/s (x's bytes / s)", "{:,.0f}"),
               ("scheduler_peak_rss_mb", "scheduler peak RSS MB", "{:,.0f}"),
               ("across_hosts_mb", "MB across the hosts' links", "{:,.0f}"),
               ("moved_mb", "MB moved (x's bytes, a lower bound)", "{:,.0f}"),
               ("scheduler_link_mb", "MB through the scheduler's link", "{:,.1f}"),
               ("relayed_mb", "MB relayed by the scheduler", "{:,.1f}")]
    peers = list(results)
    print(f"| figure | {' | '.join(peers)} |\n| --- |{' --- |' * len(peers)}")
    for figure, label, fmt in figures:
        print(f"| {label} | " + " | ".join(
            fmt.format(median(results[peer], figure)) if figure in results[peer][0] else "-" for peer in peers
        ) + " |")
    if "scaler" in results:
        scaler = results["scaler"]
        relayed = median(scaler, "relayed_mb")
        through = median(scaler, "scheduler_link_mb")
        print(f"\nscaler: scheduler peak RSS {median(scaler, 'scheduler_peak_rss_mb'):,.0f} MB (target < 150); "
              f"relayed {relayed:,.1f} MB = {100 * relayed / x_mb:.2f}% of the {x_mb:,.0f} MB moved "
              f"(target < 1%); all its traffic {through:,.1f} MB = {100 * through / x_mb:.2f}%")
        if "dask" in results:
            ratio = median(scaler, "mb_per_s") / median(results["dask"], "mb_per_s")
            print(f"scaler / dask.distributed MB/s: {ratio:.2f}x")
    print(f"load average before {load[0]}, after {load[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--chunk", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workload", choices=["transpose", "rechunk"], default="transpose")
    parser.add_argument("--peers", default="scaler,dask")
    parser.add_argument("--json", metavar="PATH", help="also write every run's figures and the medians here")
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("ip") is None:
        sys.exit("two_hosts.py needs root and ip(8): it builds network namespaces")
    peers = [peer.strip() for peer in args.peers.split(",")]
    unknown = [peer for peer in peers if peer not in PEERS]
    if unknown:
        sys.exit(f"unknown peers {unknown}; known: {', '.join(PEERS)}")
    TERMINATION.install()
    load_before = _load_average()
    results: dict[str, list[dict]] = {}
    for peer in peers:
        for figures in run_peer(peer, args):
            results.setdefault(peer, []).append(figures)
        print(f"{peer}: {json.dumps(results[peer])}", flush=True)
        if args.json:  # after each peer, so that a later peer's failure keeps this one's figures
            write_json(Path(args.json), results, args, (load_before, _load_average()))
    report(results, args, (load_before, _load_average()))


def _load_average() -> tuple:
    return tuple(round(value, 2) for value in os.getloadavg())


TERMINATION = Termination()


def write_json(path: Path, results: dict[str, list[dict]], args: argparse.Namespace, load: tuple) -> None:
    document = {
        "expression": expression_text(args), "workload": args.workload, "size": args.size, "chunk": args.chunk,
        "repeats": args.repeats, "x_mb": moved_mb(args.size), "mb": "10^6 bytes",
        "load_average_before": load[0], "load_average_after": load[1],
        "peers": {peer: {"medians": medians(runs), "runs": runs} for peer, runs in results.items()},
    }
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=1))
    temporary.replace(path)


def run_peer(peer: str, args: argparse.Namespace) -> Iterator[dict]:
    """One peer on a network of its own, removed with everything in it afterwards."""
    network = Network()
    with tempfile.TemporaryDirectory(prefix="two-hosts-") as directory:
        processes = Processes(network, directory)
        try:
            network.build()
            yield from PEERS[peer](network, processes, args)
        except BaseException:
            for log in sorted(Path(directory).glob("*.log")):
                print(f"--- {log.name}\n{log.read_text()[-3000:]}", file=sys.stderr)
            raise
        finally:
            with TERMINATION.deferred():
                processes.stop_all()
                network.close()


if __name__ == "__main__":
    main()
