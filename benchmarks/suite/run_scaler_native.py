"""This checkout's scheduler and client with native workers (native/worker/) instead of Python ones.

The same no-op workloads as run_scaler.py, through the same scheduler, with the native worker's `echo` as
the no-op and the neutral encoding (PROTOCOL.md §16) instead of pickle: what the Python worker's agent and
processor cost per task shows as the difference between the two columns.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

from workloads import Runner, process_memory, rate, result_of, sequential_round_trips, submit_loop, timed

from scaler import Client
from scaler.native_tasks import NeutralSerializer, native

READY_SECONDS = 60.0
STOP_SECONDS = 10.0


def main() -> None:
    runner = Runner("scaler (native workers)")
    executable = runner.spec.get("native_worker", "")
    if not executable:
        raise SystemExit("no native worker in the spec (benchmarks/run.py builds it with native/build.py)")
    with tempfile.TemporaryDirectory() as logs:
        processes: list[subprocess.Popen] = []
        try:
            address = _free_address()
            processes.append(_start([sys.executable, "-m", "scaler.cli.scheduler", address, "--logging-level",
                                     "WARNING"], os.path.join(logs, "scheduler.log")))
            worker_logs = [os.path.join(logs, f"worker-{index}.log") for index in range(runner.workers)]
            for index, log in enumerate(worker_logs):
                processes.append(_start([executable, address, "--worker-name", f"native-{index}",
                                         "--exit-with-parent"], log))
            _wait_until_registered(worker_logs)
            with Client(address=address, serializer=NeutralSerializer()) as client:
                measure(runner, client, scheduler_pid=processes[0].pid, worker_pids=[p.pid for p in processes[1:]])
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def measure(runner: Runner, client: Client, scheduler_pid: int, worker_pids: list[int]) -> None:
    echo = native("echo")
    client.map(echo, [(index,) for index in range(2000)])  # warm up: functions sent, code paths imported

    def run_map() -> dict:
        count = runner.count("map")
        results: list = []
        seconds = timed(lambda: results.extend(client.map(echo, [(index,) for index in range(count)])))
        assert results[-1] == count - 1
        return rate(count, seconds)

    def start(_noop: object, argument: object) -> object:
        return client.submit(echo, argument)

    runner.run("map", run_map)
    runner.run("memory", lambda: process_memory([scheduler_pid], worker_pids, "workers: native processes"))
    runner.run("submit", lambda: submit_loop(start, result_of, runner.count("submit")))
    runner.run("rtt", lambda: sequential_round_trips(start, result_of, runner.count("rtt")))


def _free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


def _start(command: list[str], log_path: str) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait_until_registered(worker_logs: list[str]) -> None:
    """Every native worker logs its welcome; no clock starts before all of them have one."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        welcomed = 0
        for path in worker_logs:
            with open(path, errors="replace") as log:
                welcomed += "connected to the scheduler" in log.read()
        if welcomed == len(worker_logs):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"{welcomed} of {len(worker_logs)} native workers registered in {READY_SECONDS:g}s")
        time.sleep(0.1)


if __name__ == "__main__":
    main()
