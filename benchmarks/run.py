"""Scaler side by side with its peers: every workload, same number of workers, interleaved repetitions.

    .venv/bin/python benchmarks/run.py              # full run, 3 repetitions (about 20 minutes on 2 cores)
    .venv/bin/python benchmarks/run.py --quick      # smaller counts, 1 repetition (a few minutes)

Installs missing peers into the running environment (benchmarks/requirements.txt; Ray optionally) and
the original Scaler 1.9.9 into benchmarks/.venv-scaler-1.9.9 (same package name as this checkout, so
it runs in a subprocess with that venv's python). Each peer runs in a fresh subprocess per
repetition; its cluster or pool is started and warmed up before any clock starts. Slow peers run
fewer tasks and are compared by rate (tasks/s, nodes/s): the count behind every figure is shown.

The workload "persist_query" persists a dask.dataframe of --persist-mb MB made on the workers, then runs a
groupby on it ten times: Scaler through scaler.compat.dask.distributed, against dask.distributed.

The workload "two_hosts" is benchmarks/two_hosts.py (issue 15's data plane on two simulated hosts, for
Scaler and dask.distributed), run once per invocation in a subprocess with its own repetitions; it needs
root and ip(8), and its rows say "skipped" without them.

Prints a table of medians and of ratios against Scaler, then the targets of issues 8 and 15 met or
missed, and writes everything to benchmarks/results/<timestamp>.json and a Markdown copy of the tables (.md).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
SUITE = BENCHMARKS / "suite"
sys.path.insert(0, str(SUITE))

import old_scaler_env  # noqa: E402 - lives in benchmarks/suite
import report  # noqa: E402
from workloads import calibrate_cpu_work  # noqa: E402

SCALER = "scaler"
OLD_SCALER = "scaler 1.9.9"
NATIVE_WORKERS = "scaler (native workers)"

# Peer -> (runner file, workloads it runs, count tier). Tiers scale the task counts of slow peers.
PEERS: dict[str, tuple[str, list[str], str]] = {
    SCALER: ("run_scaler.py", [
        "map", "memory", "memory_flat", "submit", "rtt", "graph", "graph_adapter", "dask_array", "joblib", "cpu",
        "large_args", "persist_query",
    ], "fast"),
    NATIVE_WORKERS: ("run_scaler_native.py", ["map", "memory", "submit", "rtt"], "fast"),
    OLD_SCALER: ("run_scaler_1_9_9.py", ["map", "memory", "submit", "rtt", "graph", "cpu", "large_args"], "slow"),
    "dask.distributed": ("run_dask_distributed.py", [
        "map", "memory", "submit", "rtt", "graph", "dask_array", "joblib", "cpu", "large_args", "persist_query",
    ], "slow"),
    "ray": ("run_ray.py", ["map", "memory", "submit", "rtt", "graph", "cpu", "large_args"], "medium"),
    "ProcessPoolExecutor": ("run_process_pool.py", ["map", "memory", "submit", "rtt", "cpu", "large_args"], "medium"),
    "loky (joblib)": ("run_loky.py", ["joblib", "cpu"], "fast"),
    "dask.threaded": ("run_dask_local.py", ["graph", "dask_array"], "fast"),
    "dask.multiprocessing": ("run_dask_local.py", ["graph", "dask_array"], "fast"),
}

# Tasks per workload and tier, full run; --quick divides by QUICK_DIVISOR (graph and array sizes shrink too).
COUNTS = {
    "map": {"fast": 100_000, "medium": 20_000, "slow": 10_000},
    "submit": {"fast": 100_000, "medium": 20_000, "slow": 10_000},
    "rtt": {"fast": 1000, "medium": 1000, "slow": 1000},
    "graph": {"fast": 10_000, "medium": 10_000, "slow": 10_000},
    "joblib": {"fast": 20_000, "medium": 20_000, "slow": 20_000},
    "memory_flat": {"fast": 1_000_000},
}
QUICK_DIVISOR = 5
CORE_COUNTS = {"core_scaling": 200_000, "core_scaling_batched": 1_000_000, "core_memory": 1_000_000}

# The persist-then-query dataframe, MB (10^6 bytes; 20 partitions of 16 MB): 400 MB took 44 s (Scaler) and 64 s
# (dask.distributed) per peer's run on 2 cores with 1.3 cores of other load; --quick takes a fifth.
PERSIST_MB = 320

TWO_HOSTS = BENCHMARKS / "two_hosts.py"
# Suite peer -> two_hosts.py's name for it.
TWO_HOSTS_PEERS = {SCALER: "scaler", "dask.distributed": "dask"}
# x is 16384x16384 float64: 2.15 GB of intermediates, the issue's "at least 2 GB", also with --quick. One
# computation takes about 5 s per peer on 2 cores, so 3 repetitions and both clusters' start-up stay
# within about 2 minutes; --quick runs 1.
TWO_HOSTS_SIZE = 16384
TWO_HOSTS_CHUNK = 2048
TWO_HOSTS_REPEATS = 3
TWO_HOSTS_GRACE_SECONDS = 60.0  # after a SIGTERM, two_hosts.py stops its processes and removes its namespaces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a fifth of the tasks and 1 repetition")
    parser.add_argument("--repeats", type=int, help="repetitions, interleaving peers (default 3, 1 with --quick)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes for every peer (default 2)")
    parser.add_argument("--peers", help=f"comma-separated subset of: {', '.join(PEERS)}")
    parser.add_argument("--workloads", help="comma-separated subset of: " + ", ".join(report.WORKLOAD_NAMES))
    parser.add_argument("--persist-mb", type=int, help=f"size of the persist-then-query dataframe, MB (default "
                        f"{PERSIST_MB}, {PERSIST_MB // QUICK_DIVISOR} with --quick)")
    parser.add_argument("--no-core", action="store_true", help="skip the simulated scheduler core figures")
    parser.add_argument("--no-install", action="store_true", help="do not pip-install missing peers")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds for one peer's run (default 1200)")
    parser.add_argument("--idle-wait", type=float, default=60, help="seconds to wait, before each peer's run, for "
                        "other processes to leave the CPUs idle (default 60; the load seen is reported either way)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    peers = _chosen(args.peers, list(PEERS), "peer")
    workloads = _chosen(args.workloads, report.WORKLOAD_NAMES, "workload")

    started = time.time()
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    results_dir = BENCHMARKS / "results"
    results_dir.mkdir(exist_ok=True)
    log_dir = results_dir / f"{stamp}-logs"
    log_dir.mkdir()

    skipped: dict[str, str] = {}
    _ensure_peers(peers, skipped, install=not args.no_install)
    old_python = None
    if OLD_SCALER in peers and _runs_any(OLD_SCALER, workloads):
        old_python, reason = old_scaler_env.ensure(install=not args.no_install)
        if old_python is None:
            skipped[OLD_SCALER] = reason
    active = [peer for peer in peers if peer not in skipped]
    two_hosts_peers = [peer for peer in TWO_HOSTS_PEERS if peer in active] if "two_hosts" in workloads else []
    two_hosts_unavailable = _two_hosts_unavailable() if two_hosts_peers else ""
    if two_hosts_unavailable:
        skipped["two_hosts workload"] = two_hosts_unavailable

    iterations, task_seconds = calibrate_cpu_work(0.020)
    base_spec = _base_spec(args, iterations, task_seconds)
    if NATIVE_WORKERS in active and _runs_any(NATIVE_WORKERS, workloads):
        native_worker, reason = _native_worker()
        if native_worker:
            base_spec["native_worker"] = native_worker
        else:
            skipped[NATIVE_WORKERS] = reason
            active.remove(NATIVE_WORKERS)
    machine = _machine()
    print(report.machine_line(machine), flush=True)
    print(f"cpu task: {iterations:,} iterations = {task_seconds * 1e3:.1f} ms here; {repeats} repetition(s); "
          f"logs in {log_dir}", flush=True)
    for peer, reason in skipped.items():
        print(f"  {peer}: skipped: {reason}", flush=True)

    runs: list[dict] = []
    for repetition in range(repeats):
        order = active[repetition % len(active):] + active[:repetition % len(active)] if active else []
        for peer in order:
            wanted = [workload for workload in PEERS[peer][1] if workload in workloads]
            if not wanted:
                continue
            spec = _peer_spec(base_spec, peer, wanted, args.quick)
            python = old_python if peer == OLD_SCALER else Path(sys.executable)
            log = log_dir / f"{_slug(peer)}-{repetition}.log"
            print(f"[{repetition + 1}/{repeats}] {peer} ...", end=" ", flush=True)
            _wait_for_idle_cpus(args.idle_wait)
            outcome = _run_peer(python, PEERS[peer][0], spec, log, args.timeout)
            outcome.update(peer=peer, repetition=repetition, spec=spec)
            runs.append(outcome)
            print(f"{outcome['wall_seconds']:.0f} s, other load {outcome['background_cores']:.2f} cores"
                  + (f" ({outcome['failure']})" if outcome.get("failure") else ""), flush=True)

    two_hosts: dict = {}
    if two_hosts_peers:
        two_hosts, two_hosts_runs = _two_hosts(two_hosts_peers, two_hosts_unavailable, args, log_dir)
        runs.extend(two_hosts_runs)

    core: dict = {}
    if not args.no_core and SCALER in active and any(w in workloads for w in ("core_scaling", "core_memory")):
        print("scheduler core, simulated ...", end=" ", flush=True)
        spec = dict(base_spec, workloads=["core_scaling", "core_memory"], core_workers=[10, 100, 1000],
                    core_memory_workers=1000,
                    counts={name: count // (QUICK_DIVISOR if args.quick else 1) for name, count in CORE_COUNTS.items()})
        core = _run_peer(Path(sys.executable), "core_scaling.py", spec, log_dir / "core.log", args.timeout)
        print(f"{core['wall_seconds']:.0f} s", flush=True)

    medians = report.medians(runs)
    document = {
        "machine": machine, "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "wall_seconds": time.time() - started, "repeats": repeats, "quick": args.quick, "workers": args.workers,
        "cpu_task": {"iterations": iterations, "seconds": task_seconds}, "skipped": skipped,
        "medians": medians, "core": core.get("workloads", {}), "two_hosts": two_hosts, "runs": runs,
    }
    document["targets"] = report.targets(medians, document["core"])
    document["targets_issue_15"] = report.targets_issue_15(medians)
    text = report.render(document)
    print()
    print(text)
    json_path = results_dir / f"{stamp}.json"
    json_path.write_text(json.dumps(document, indent=1, default=str))
    (results_dir / f"{stamp}.md").write_text(report.render_markdown(document))
    print(f"\nwrote {json_path} and {json_path.with_suffix('.md')} ({(time.time() - started) / 60:.1f} min)")


def _runs_any(peer: str, workloads: list[str]) -> bool:
    """Whether `peer` has any of `workloads` to run (no need to prepare a peer that runs nothing)."""
    return any(workload in workloads for workload in PEERS[peer][1])


def _chosen(given: str | None, known: list[str], kind: str) -> list[str]:
    if not given:
        return list(known)
    chosen = [item.strip() for item in given.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in known]
    if unknown:
        raise SystemExit(f"unknown {kind}(s) {unknown}; choose from {known}")
    return chosen


def _ensure_peers(peers: list[str], skipped: dict[str, str], install: bool) -> None:
    """Install what the chosen peers need into this environment; Ray is optional."""
    needed = {"dask", "distributed", "joblib", "loky", "numpy", "psutil"}
    missing = sorted(module for module in needed if importlib.util.find_spec(module) is None)
    if missing and install:
        print(f"installing peers {missing} from benchmarks/requirements.txt ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-r", str(BENCHMARKS / "requirements.txt")],
                       check=False)
        importlib.invalidate_caches()
    if "ray" in peers and importlib.util.find_spec("ray") is None:
        if install:
            print("installing ray (optional) ...", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "ray"], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            importlib.invalidate_caches()
        if importlib.util.find_spec("ray") is None:
            skipped["ray"] = "ray not installed (no wheel for this Python/platform, or --no-install)"
    requirements = {
        "dask.distributed": ("distributed", "dask"), "loky (joblib)": ("joblib", "loky"),
        "dask.threaded": ("dask", "numpy"), "dask.multiprocessing": ("dask", "numpy"),
    }
    for peer, modules in requirements.items():
        absent = [module for module in modules if importlib.util.find_spec(module) is None]
        if peer in peers and absent:
            skipped[peer] = f"{', '.join(absent)} not installed"


def _native_worker() -> tuple[str, str]:
    """(the native worker's executable, "") or ("", why not): SCALER_NATIVE_WORKER, or built by native/build.py."""
    given = os.environ.get("SCALER_NATIVE_WORKER", "")
    if given:
        return (given, "") if os.access(given, os.X_OK) else ("", f"SCALER_NATIVE_WORKER={given} is not executable")
    print("building the native worker (native/build.py) ...", file=sys.stderr, flush=True)
    built = subprocess.run([sys.executable, str(BENCHMARKS.parent / "native" / "build.py")], capture_output=True,
                           text=True)
    if built.returncode != 0:
        return "", built.stderr.strip().splitlines()[-1] if built.stderr.strip() else "native/build.py failed"
    return built.stdout.strip().splitlines()[-1], ""


def _base_spec(args: argparse.Namespace, iterations: int, task_seconds: float) -> dict:
    quick = args.quick
    return {
        "workers": args.workers,
        "cpu_iterations": iterations, "cpu_task_seconds": task_seconds, "cpu_tasks": 100 if quick else 200,
        "large_count": 10 if quick else 20, "large_bytes": 50 * 2**20,
        "array_size": 2000 if quick else 4000, "array_chunk": 250,
        "persist_mb": args.persist_mb or (PERSIST_MB // QUICK_DIVISOR if quick else PERSIST_MB),
    }


def _peer_spec(base: dict, peer: str, workloads: list[str], quick: bool) -> dict:
    tier = PEERS[peer][2]
    counts = {}
    for workload, by_tier in COUNTS.items():
        if tier in by_tier:
            count = by_tier[tier]
            counts[workload] = max(100, count // QUICK_DIVISOR) if quick and workload != "rtt" else count
    if quick:
        counts["rtt"] = 300
    spec = dict(base, workloads=workloads, counts=counts)
    if peer.startswith("dask.") and peer != "dask.distributed":
        spec["variant"] = "threads" if peer == "dask.threaded" else "processes"
    return spec


def _run_peer(python: Path, script: str, spec: dict, log: Path, timeout: float) -> dict:
    """Run one runner in its own session (so a timeout can stop its whole process tree); its JSON figures."""
    # The caller's PYTHONPATH (a checkout's scaler, say) reaches this environment's runners, never 1.9.9's venv.
    paths = [str(SUITE)]
    if python == Path(sys.executable) and os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "out.json"
        command = [str(python), str(SUITE / script), "--spec", json.dumps(spec), "--output", str(output)]
        outcome = _run_measured(command, paths, Path(scratch), log, timeout)
        figures = json.loads(output.read_text()) if output.exists() else {"workloads": {}, "notes": []}
    figures.update(outcome)
    return figures


def _run_measured(command: list[str], paths: list[str], scratch: Path, log: Path, timeout: float,
                  grace: float = 5.0) -> dict:
    """Run `command` in its own session, output to `log`: its wall time, the background load, any failure."""
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1")
    busy_before, ours_before = _busy_cpu_seconds(), _children_cpu_seconds()
    started = time.perf_counter()
    with open(log, "w") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=environment, cwd=scratch, start_new_session=True)
        failure = ""
        try:
            code = process.wait(timeout=timeout)
            if code != 0:
                failure = f"exit code {code}, see {log.name}"
        except subprocess.TimeoutExpired:
            failure = f"timed out after {timeout:.0f} s, see {log.name}"
        _stop_group(process, grace)
    wall = time.perf_counter() - started
    others = (_busy_cpu_seconds() - busy_before) - (_children_cpu_seconds() - ours_before)
    # CPU used meanwhile by processes outside this run (other users' jobs), in cores: 0 on a quiet machine.
    outcome: dict = {"wall_seconds": wall, "background_cores": max(0.0, others / wall)}
    if failure:
        outcome["failure"] = failure
    return outcome


def _two_hosts_unavailable() -> str:
    """Why benchmarks/two_hosts.py cannot run here, or ""."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root: benchmarks/two_hosts.py builds network namespaces"
    if shutil.which("ip") is None:
        return "needs ip(8) (iproute2): benchmarks/two_hosts.py builds network namespaces"
    absent = [module for module in ("dask", "distributed", "numpy") if importlib.util.find_spec(module) is None]
    return f"{', '.join(absent)} not installed" if absent else ""


def _two_hosts(peers: list[str], unavailable: str, args: argparse.Namespace, log_dir: Path) -> tuple[dict, list[dict]]:
    """Run benchmarks/two_hosts.py once for `peers`: its output, and one run entry per peer for the medians."""
    repeats = 1 if args.quick else TWO_HOSTS_REPEATS
    outcome: dict = {"peers": peers, "size": TWO_HOSTS_SIZE, "chunk": TWO_HOSTS_CHUNK, "repeats": repeats}
    if unavailable:
        outcome["skipped"] = unavailable
        return outcome, [_two_hosts_run(peer, {"skipped": unavailable}) for peer in peers]
    print("two hosts (benchmarks/two_hosts.py) ...", end=" ", flush=True)
    _wait_for_idle_cpus(args.idle_wait)
    log = log_dir / "two-hosts.log"
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "two_hosts.json"
        command = [sys.executable, str(TWO_HOSTS), "--size", str(TWO_HOSTS_SIZE), "--chunk", str(TWO_HOSTS_CHUNK),
                   "--repeats", str(repeats), "--peers", ",".join(TWO_HOSTS_PEERS[peer] for peer in peers),
                   "--json", str(output)]
        paths = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
        outcome.update(_run_measured(command, paths, Path(scratch), log, args.timeout, TWO_HOSTS_GRACE_SECONDS))
        produced = json.loads(output.read_text()) if output.exists() else {}
    print(f"{outcome['wall_seconds']:.0f} s, other load {outcome['background_cores']:.2f} cores"
          + (f" ({outcome['failure']})" if outcome.get("failure") else ""), flush=True)
    outcome["output"] = produced
    entries = []
    noted = False
    for peer in peers:
        measured = produced.get("peers", {}).get(TWO_HOSTS_PEERS[peer])
        if not measured:
            failure = outcome.get("failure", "")
            # An exit with an error ends with its message; a timeout's last line is whatever ran at the time.
            why = failure + _last_line(log) if failure.startswith("exit code") else failure or "no figures"
            entries.append(_two_hosts_run(peer, {"error": why}))
            continue
        figures = dict(measured["medians"])
        for key in ("seconds", "mb_per_s"):
            values = [run[key] for run in measured["runs"]]
            if len(values) > 1:
                figures[f"{key}_spread"] = [min(values), max(values)]
        if not noted:  # one note for the workload, on the first column with figures
            noted = True
            figures["note"] = (f"{produced['expression']}, x {produced['size']}x{produced['size']} float64 in "
                               f"{produced['chunk']}x{produced['chunk']} chunks ({produced['x_mb'] / 1000:.2f} GB), "
                               f"median of {produced['repeats']} run(s) of benchmarks/two_hosts.py; "
                               "its MB are 10^6 bytes; CPU used by other processes meanwhile "
                               f"{outcome['background_cores']:.2f} cores")
        entries.append(_two_hosts_run(peer, figures))
    return outcome, entries


def _two_hosts_run(peer: str, figures: dict) -> dict:
    """A run entry like a runner's, without a background load (two_hosts.py's is in the document's "two_hosts")."""
    return {"peer": peer, "repetition": 0, "source": "benchmarks/two_hosts.py", "workloads": {"two_hosts": figures},
            "notes": []}


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text().splitlines() if line.strip()]
    except OSError:
        return ""
    return f": {lines[-1].strip()[:200]}" if lines else ""


def _busy_cpu_seconds() -> float:
    """CPU time all processes on this machine have used since boot (Linux; 0 elsewhere)."""
    try:
        with open("/proc/stat") as file:
            fields = [int(value) for value in file.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _wait_for_idle_cpus(limit_seconds: float) -> float:
    """Wait up to `limit_seconds` for a second in which other processes use under a quarter of a core."""
    deadline = time.monotonic() + limit_seconds
    while True:
        before = _busy_cpu_seconds()
        time.sleep(1.0)
        load = _busy_cpu_seconds() - before
        if load < 0.25 or time.monotonic() >= deadline:
            return load


def _stop_group(process: subprocess.Popen, grace: float = 5.0) -> None:
    """Whatever the runner left behind (a killed run's cluster) goes with its session's process group."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            process.poll()  # an exited leader not yet reaped is a zombie, and keeps its group "alive"
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
    if process.poll() is None:
        process.wait()


def _machine() -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as file:
            cpu = next((line.split(":", 1)[1].strip() for line in file if line.startswith("model name")), cpu)
    except OSError:
        pass
    commit = ""
    if shutil.which("git"):
        described = subprocess.run(["git", "-C", str(BENCHMARKS), "describe", "--always", "--dirty"],
                                   capture_output=True, text=True)
        commit = described.stdout.strip()
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else 0
    return {
        "date": datetime.date.today().isoformat(), "nproc": os.cpu_count(), "cpu": cpu, "memory_gb": round(memory_gb),
        "python": platform.python_version(), "platform": platform.platform(), "commit": commit,
        "versions": _versions(),
    }


def _versions() -> dict:
    from importlib import metadata

    versions = {}
    for package in ("scaler", "dask", "distributed", "ray", "joblib", "loky", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    versions["scaler 1.9.9"] = old_scaler_env.VERSION
    return versions


def _slug(name: str) -> str:
    return "".join(character if character.isalnum() else "-" for character in name).strip("-")


if __name__ == "__main__":
    main()
