"""Issue 25's scale benchmark: one scheduler, hundreds of native workers on simulated hosts, dozens of clients.

    sudo python benchmarks/scale.py [--workers 10,100,500] [--clients 1,10,50] [--hosts 10] [--tasks 100000]
                                    [--latency-seconds 5] [--kill 100] [--worker-timeout 60] [--json PATH]
                                    [--worker-queue-seconds S] [--idle-seconds 20]

For each number of workers W, on a fresh scheduler in a network namespace of its own, with the workers
spread over `--hosts` host namespaces (several native workers each, all on one bridge; the clients and
the monitor in the root namespace):

1. join storm: all W native workers started at once; seconds until the scheduler registered the last one
   (its log), and whether any worker was dropped or exited meanwhile or afterwards; then the scheduler's CPU
   for `--idle-seconds` with no task (what W workers cost per second: their heartbeats);
2. for each number of clients C: a `map` of `--tasks` native no-op tasks (`echo`) split over C client
   processes started together: tasks/s, the scheduler's CPU per task (utime+stime of its pid over the
   run, /proc) and its RSS;
3. for each C: one small client's single round trips (p50/p90/p99) for `--latency-seconds` while the
   C-1 others flood (maps of `--flood-chunk` tasks one after the other); with C=1 the probe runs alone;
4. the monitor feed with W rows: the snapshot's size, its encode and decode time, scaler_top's render
   time, and scaler_top itself run under a pseudo-terminal (it must draw the workers and quit on `q`);
5. `--kill` workers (at most a fifth of W, picked at random) SIGKILLed at once while a client maps
   `--tasks` tasks: every task must come back with its own result; the seconds from the kill to the map's
   end (the scheduler notices the dead workers after `--worker-timeout` seconds of silence and hands their
   tasks on).

One table, one row per (W, C); the W-only figures on the first row of each W. Needs root (network
namespaces); without it, or with `--one-host`, everything runs in the root namespace on 127.0.0.1, and
the table says so. Every namespace, veth and process is removed at the end, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scale_monitor import monitor_figures, wait_for_snapshot  # noqa: E402
from simulated_hosts import SimulatedHosts, Termination  # noqa: E402

SCHEDULER_PORT = 25671
CLIENT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scale_client.py")
START_SECONDS = 300.0
TICKS = os.sysconf("SC_CLK_TCK")
TERMINATION = Termination()


# ------------------------------------------------------------------------------------------ /proc


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB."""
    figures = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                figures[line.split(":")[0]] = int(line.split()[1]) / 1024
    return figures.get("VmRSS", 0.0), figures.get("VmHWM", 0.0)


# ------------------------------------------------------------------------------------------ one W


class Cell:
    """A scheduler and W native workers on simulated hosts (or on this host), and what they logged."""

    def __init__(self, args: argparse.Namespace, workers: int, directory: str) -> None:
        self.args = args
        self.worker_count = workers
        self.directory = directory
        hosts = 0 if args.one_host else max(1, min(args.hosts, workers))
        self.hosts = SimulatedHosts(hosts)
        self.scheduler: subprocess.Popen | None = None
        self.worker_pids: list[int] = []
        self.address = ""
        self.monitor_address = f"ipc://{directory}/monitor"
        self.idle_percent = 0.0

    def start_scheduler(self) -> None:
        if not self.args.one_host:
            self.hosts.build()
        host = "127.0.0.1" if self.args.one_host else self.hosts.address("s")
        self.address = f"tcp://{host}:{SCHEDULER_PORT}"
        role = "root" if self.args.one_host else "s"
        with open(os.path.join(self.directory, "scheduler.log"), "w") as log:
            self.scheduler = self.hosts.spawn(role, [
                sys.executable, "-m", "scaler.cli.scheduler", self.address, "--monitor-address", self.monitor_address,
                "--worker-timeout-seconds", str(self.args.worker_timeout), "--logging-level", "INFO",
                *([] if self.args.worker_queue_seconds is None
                  else ["--worker-queue-seconds", str(self.args.worker_queue_seconds)]),
            ], log)
        deadline = time.monotonic() + START_SECONDS
        while "listening on" not in self.scheduler_log():
            if self.scheduler.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the scheduler did not start:\n{self.scheduler_log()[-2000:]}")
            time.sleep(0.1)

    def scheduler_log(self) -> str:
        return Path(self.directory, "scheduler.log").read_text(errors="replace")

    def join_storm(self) -> dict:
        """Start every worker at once (one small shell per host starts that host's workers, so that the
        storm is not paced by this process forking hundreds of times); seconds until the scheduler has
        registered them all."""
        assert self.scheduler is not None
        cpu_before = cpu_seconds(self.scheduler.pid)
        started = time.monotonic()
        hosts = max(1, self.hosts.host_count)
        launchers = []
        for host in range(hosts):
            commands = []
            for index in range(host, self.worker_count, hosts):
                command = [self.args.native_worker, self.address, "--worker-name", f"host{host}-worker{index}",
                           "--death-timeout-seconds", "600", "--logging-level", "WARNING"]
                log = shlex.quote(os.path.join(self.directory, f"worker-{index}.log"))
                commands.append(f"{shlex.join(command)} >{log} 2>&1 & echo $!")
            role = "root" if self.args.one_host else self.hosts.host_role(host)
            launcher = self.hosts.spawn(role, ["/bin/sh", "-c", "\n".join([*commands, "wait"])],
                                        subprocess.DEVNULL, stdout=subprocess.PIPE)
            launchers.append((launcher, len(commands)))
        for launcher, count in launchers:
            self.worker_pids.extend(int(_read_line(launcher, START_SECONDS)) for _ in range(count))
        spawned = time.monotonic() - started
        deadline = started + START_SECONDS
        joined = 0
        while joined < self.worker_count and time.monotonic() < deadline:
            joined = self.scheduler_log().count(" connected, capacity ")
            time.sleep(0.05)
        seconds = time.monotonic() - started
        return {
            "join_seconds": seconds if joined == self.worker_count else None, "joined": joined,
            "spawn_seconds": spawned, "join_scheduler_cpu_seconds": cpu_seconds(self.scheduler.pid) - cpu_before,
        }

    def idle(self, seconds: float) -> dict:
        """The scheduler's CPU with every worker connected and no task, in % of a core over `seconds`: what W workers
        cost per second (their heartbeats), whatever runs. Per task it shows as much as the map lasts."""
        assert self.scheduler is not None
        before = cpu_seconds(self.scheduler.pid)
        time.sleep(seconds)
        self.idle_percent = (cpu_seconds(self.scheduler.pid) - before) / seconds * 100
        return {"idle_scheduler_cpu_percent": self.idle_percent}

    def dropped_workers(self) -> dict:
        log = self.scheduler_log()
        return {
            "workers_timed_out": log.count("timed out, "),
            "workers_disconnected": sum(1 for line in log.splitlines() if "PeerRegistry: worker" in line
                                        and "disconnected" in line),
            "workers_exited": sum(1 for pid in self.worker_pids if not os.path.exists(f"/proc/{pid}")),
        }

    def clients(self, roles: list[tuple[str, list[str]]]) -> tuple[list[dict], float]:
        """Start one client process per (role, extra arguments), wait for all to be ready, say go, collect: the
        reports, and the scheduler's CPU seconds from go to the last report."""
        assert self.scheduler is not None
        processes = []
        for index, (role, extra) in enumerate(roles):
            log = open(os.path.join(self.directory, f"client-{index}.log"), "a")
            processes.append(self.hosts.spawn("root", [sys.executable, CLIENT_SCRIPT, self.address, role, *extra],
                                              log, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
            log.close()
        try:
            for process in processes:
                if _read_line(process, START_SECONDS) != "ready":
                    raise RuntimeError(f"a client did not get ready; see {self.directory}/client-*.log")
            cpu_at_go = cpu_seconds(self.scheduler.pid)
            for process in processes:
                assert process.stdin is not None
                process.stdin.write(b"go\n")
                process.stdin.flush()
            reports = []
            for process in processes:
                line = _read_line(process, START_SECONDS * 4)
                if not line.startswith("{"):
                    raise RuntimeError(f"a client failed: {line!r}; see {self.directory}/client-*.log")
                reports.append(json.loads(line))
            return reports, cpu_seconds(self.scheduler.pid) - cpu_at_go
        finally:
            self.hosts.stop_processes(processes)

    def throughput(self, client_count: int) -> dict:
        assert self.scheduler is not None
        share = self.args.tasks // client_count
        pid = self.scheduler.pid
        # The clock starts when the clients are told to go: clients() waits for all of them to be ready first.
        reports, cpu = self.clients([("map", ["--tasks", str(share)])] * client_count)
        tasks = sum(report["tasks"] for report in reports)
        wall = max(report["ended"] for report in reports) - min(report["started"] for report in reports)
        rss, peak = rss_mb(pid)
        return {
            "tasks": tasks, "all_correct": all(report["correct"] for report in reports),
            "tasks_per_second": tasks / wall,
            "scheduler_us_per_task": cpu / tasks * 1e6, "scheduler_rss_mb": rss, "scheduler_peak_rss_mb": peak,
            # What the tasks cost beyond what the connected workers cost per second anyway (a slow map pays more of it).
            "scheduler_us_per_task_beyond_idle": (cpu - self.idle_percent / 100 * wall) / tasks * 1e6,
        }

    def latency(self, client_count: int) -> dict:
        seconds = str(self.args.latency_seconds)
        roles = [("probe", ["--seconds", seconds])]
        roles += [("flood", ["--seconds", seconds, "--chunk", str(self.args.flood_chunk)])] * (client_count - 1)
        reports, _ = self.clients(roles)
        samples = sorted(reports[0]["samples"])
        flooded = sum(report["tasks"] for report in reports[1:])
        return {
            "probe_round_trips": len(samples), "probe_p50_ms": _percentile(samples, 50) * 1e3,
            "probe_p90_ms": _percentile(samples, 90) * 1e3, "probe_p99_ms": _percentile(samples, 99) * 1e3,
            "flood_tasks_per_second": flooded / max(1e-9, max(r["ended"] for r in reports) - reports[0]["started"]),
        }

    def kill(self, rate: float) -> dict:
        """Kill a number of workers at once a second into a map sized to run about `--kill-map-seconds` at `rate`
        tasks/s; every task must still come back with its own result."""
        count = min(self.args.kill, self.worker_count // 5)
        if count == 0:
            return {"killed": 0}
        tasks = max(self.args.tasks, int(rate * self.args.kill_map_seconds))
        log = open(os.path.join(self.directory, "client-kill.log"), "a")
        client = self.hosts.spawn("root", [sys.executable, CLIENT_SCRIPT, self.address, "map", "--tasks", str(tasks)],
                                  log, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        log.close()
        try:
            if _read_line(client, START_SECONDS) != "ready":
                raise RuntimeError("the kill test's client did not get ready")
            assert client.stdin is not None
            client.stdin.write(b"go\n")
            client.stdin.flush()
            time.sleep(1.0)
            killed_at = time.time()
            # Workers picked at random (seeded): the last ones started may hold no task of a map of tiny tasks,
            # which idle workers get in batches (function_pace.py), and then no task would need rescuing.
            for pid in random.Random(25).sample(self.worker_pids, count):
                os.kill(pid, signal.SIGKILL)
            line = _read_line(client, START_SECONDS * 4)
            report = json.loads(line) if line.startswith("{") else {}
            after = wait_for_snapshot(self.monitor_address, lambda s: len(s.workers) == self.worker_count - count,
                                      self.args.worker_timeout + 30)
            return {
                "killed": count, "kill_map_tasks": tasks,
                "kill_all_correct": bool(report.get("correct")) and report.get("tasks") == tasks,
                "kill_map_seconds_after_kill": report["ended"] - killed_at if report else None,
                "kill_map_seconds": report["ended"] - report["started"] if report else None,
                "kill_workers_left": len(after.workers) if after else None,
                "kill_failed_tasks": after.tasks.failed if after else None,
            }
        finally:
            self.hosts.stop_processes([client])

    def close(self) -> None:
        with TERMINATION.deferred():
            self.hosts.close()


def _read_line(process: subprocess.Popen, seconds: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], seconds)
    if not ready:
        return ""
    return process.stdout.readline().decode(errors="replace").strip()


def _percentile(samples: list[float], percent: float) -> float:
    if not samples:
        return float("nan")
    return samples[min(len(samples) - 1, int(len(samples) * percent / 100))]


# ------------------------------------------------------------------------------------------ the run


def run_workers(args: argparse.Namespace, worker_count: int) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="scale-") as directory:
        cell = Cell(args, worker_count, directory)
        try:
            cell.start_scheduler()
            assert cell.scheduler is not None
            first: dict[str, Any] = {"workers": worker_count, **cell.join_storm(), **cell.idle(args.idle_seconds)}
            print(f"W={worker_count}: {json.dumps(first)}", flush=True)
            rows = []
            for client_count in args.clients:
                row: dict[str, Any] = {"workers": worker_count, "clients": client_count}
                row.update(cell.throughput(client_count))
                row.update(cell.latency(client_count))
                print(f"W={worker_count} C={client_count}: {json.dumps(row)}", flush=True)
                rows.append(row)
            first.update(monitor_figures(cell.monitor_address, worker_count, directory))
            first.update(cell.dropped_workers())
            first.update(cell.kill(rows[0]["tasks_per_second"]))
            first["scheduler_peak_rss_mb_end"] = rss_mb(cell.scheduler.pid)[1]
            print(f"W={worker_count}: {json.dumps(first)}", flush=True)
            rows[0].update(first)
            return rows
        except BaseException:
            for name in ("scheduler.log", "client-0.log", "client-kill.log"):
                path = Path(directory, name)
                if path.exists():
                    print(f"--- {name}\n{path.read_text(errors='replace')[-3000:]}", file=sys.stderr)
            raise
        finally:
            cell.close()


COLUMNS = [
    ("workers", "W", "{}"), ("clients", "C", "{}"),
    ("join_seconds", "join storm s", "{:.1f}"), ("workers_timed_out", "dropped", "{}"),
    ("idle_scheduler_cpu_percent", "idle sched CPU %", "{:.1f}"),
    ("tasks_per_second", "map tasks/s", "{:,.0f}"), ("scheduler_us_per_task", "sched CPU µs/task", "{:.1f}"),
    ("scheduler_us_per_task_beyond_idle", "beyond idle µs/task", "{:.1f}"),
    ("scheduler_peak_rss_mb", "sched peak RSS MB", "{:.0f}"),
    ("probe_p50_ms", "probe p50 ms", "{:.2f}"), ("probe_p90_ms", "p90 ms", "{:.2f}"),
    ("probe_p99_ms", "p99 ms", "{:.2f}"),
    ("snapshot_kb", "feed snapshot KB", "{:.0f}"), ("encode_ms", "encode ms", "{:.1f}"),
    ("render_ms", "top render ms", "{:.1f}"), ("top_drew", "top ok", "{}"),
    ("killed", "killed", "{}"), ("kill_all_correct", "no task lost", "{}"),
    ("kill_map_seconds_after_kill", "map end after kill s", "{:.1f}"),
]


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(label for _, label, _ in COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for row in rows:
        cells = []
        for key, _, fmt in COLUMNS:
            value = row.get(key)
            cells.append("" if value is None else fmt.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="10,100,500", help="numbers of native workers, one scheduler each")
    parser.add_argument("--clients", default="1,10,50", help="numbers of client processes")
    parser.add_argument("--hosts", type=int, default=10, help="simulated hosts the workers are spread over")
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks of the map (split over the clients)")
    parser.add_argument("--latency-seconds", type=float, default=5.0, help="how long the probe measures")
    # At least the longest heartbeat interval a scheduler asks of many workers (a quarter of the worker timeout):
    # the workers of a join storm heartbeat together, so a shorter window may hold one burst, or none.
    parser.add_argument("--idle-seconds", type=float, default=20.0,
                        help="after the join storm: the scheduler's CPU measured this long with no task")
    parser.add_argument("--flood-chunk", type=int, default=10_000, help="tasks of each flooding client's maps")
    parser.add_argument("--kill", type=int, default=100, help="workers SIGKILLed at once (at most a fifth of W)")
    parser.add_argument("--kill-map-seconds", type=float, default=5.0,
                        help="the kill test's map is sized to last about this long at the measured 1-client rate")
    parser.add_argument("--worker-timeout", type=float, default=60.0, help="the scheduler's --worker-timeout-seconds")
    parser.add_argument("--worker-queue-seconds", type=float, default=None,
                        help="the scheduler's --worker-queue-seconds (prefetch); default: the scheduler's own")
    parser.add_argument("--native-worker", default=os.environ.get("SCALER_NATIVE_WORKER", ""),
                        help="the native worker's executable (default: $SCALER_NATIVE_WORKER)")
    parser.add_argument("--one-host", action="store_true", help="no namespaces: everything on 127.0.0.1")
    parser.add_argument("--json", metavar="PATH", help="also write every figure here")
    args = parser.parse_args()
    args.workers = [int(value) for value in args.workers.split(",")]
    args.clients = [int(value) for value in args.clients.split(",")]
    if not args.native_worker or not os.access(args.native_worker, os.X_OK):
        sys.exit("give the native worker's executable: --native-worker PATH or SCALER_NATIVE_WORKER (native/build.py)")
    if not args.one_host and (os.geteuid() != 0 or shutil.which("ip") is None):
        print("scale.py: no root or no ip(8): network namespaces are impossible; running on ONE host", file=sys.stderr)
        args.one_host = True
    TERMINATION.install()
    load_before = os.getloadavg()
    rows: list[dict] = []
    started = time.monotonic()
    for worker_count in args.workers:
        rows.extend(run_workers(args, worker_count))
    where = "one host (127.0.0.1), no namespaces" if args.one_host else f"{args.hosts} simulated hosts"
    print(f"\n{args.tasks:,}-task maps of native no-op tasks; W workers on {where}; C clients; "
          f"probe for {args.latency_seconds:g} s while C-1 clients flood; worker timeout {args.worker_timeout:g} s")
    print(table(rows))
    load_after = os.getloadavg()
    print(f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
          f"{time.monotonic() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "rows": rows, "where": where, "tasks": args.tasks, "load_before": load_before, "load_after": load_after,
        }, indent=1))


if __name__ == "__main__":
    main()
