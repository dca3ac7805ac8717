"""`scaler FILE.toml` as a user runs it: the example site serves a client and stops cleanly, a broken file fails
fast, a failing part is named, and nothing outlives the site, even when it is killed.

Each `scaler` started here is a child of the test, stopped and reaped in a `finally`; what it started is looked
up while it runs (psutil) and checked to be gone afterwards.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.utility.process_stop import stop_process
from tests.conftest import REPO_ROOT, console_script

SITE = console_script("scaler")
SCHEDULER = console_script("scaler_scheduler")
EXAMPLE = os.path.join(REPO_ROOT, "examples", "site.toml")
EXAMPLE_ADDRESS = "tcp://127.0.0.1:2345"

UP_SECONDS = 60.0  # generous for a loaded machine, still bounded
EXIT_SECONDS = 20.0


class RunningSite:
    def __init__(self, path: str, tmp_path: Path) -> None:
        self.stdout_path = tmp_path / "site.out"
        self.stderr_path = tmp_path / "site.err"
        with open(self.stdout_path, "wb") as stdout, open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen([SITE, path], stdout=stdout, stderr=stderr, cwd=tmp_path)

    def said(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_until(self, text: str, seconds: float = UP_SECONDS) -> None:
        deadline = time.monotonic() + seconds
        while text not in self.said():
            assert self.process.poll() is None, f"scaler exited with {self.process.returncode}:\n{self.said()}"
            assert time.monotonic() < deadline, f"no {text!r} within {seconds} s:\n{self.said()}"
            time.sleep(0.1)

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def stop(self) -> None:
        stop_process(self.process, 5.0)


def assert_gone(processes: list[psutil.Process]) -> None:
    _, alive = psutil.wait_procs(processes, timeout=EXIT_SECONDS)
    alive = [process for process in alive if _is_live(process)]
    assert not alive, f"left behind: {[(process.pid, process.cmdline()) for process in alive]}"


def _is_live(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def site_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "site.toml"
    path.write_text(text)
    return str(path)


def test_the_example_site_serves_a_client_and_stops_on_sigterm(tmp_path: Path) -> None:
    with open(EXAMPLE, encoding="utf-8") as file:
        example = file.read()
    assert f'address = "{EXAMPLE_ADDRESS}"' in example
    address = free_local_address()  # the example's port may be taken on a shared machine
    site = RunningSite(site_file(tmp_path, example.replace(EXAMPLE_ADDRESS, address)), tmp_path)
    try:
        site.wait_until("scaler: the site is up")
        started = site.descendants()
        assert len(started) >= 5, started  # scheduler, cluster, its store, two workers (and their processors)
        with Client(address) as client:
            assert client.submit(pow, 2, 10).result(timeout=60) == 1024
        site.process.send_signal(signal.SIGTERM)
        assert site.process.wait(timeout=EXIT_SECONDS) == 0, site.said()
    finally:
        site.stop()
    assert "scaler: every part has stopped" in site.said()
    assert_gone(started)


def test_a_site_killed_outright_leaves_nothing_behind(tmp_path: Path) -> None:
    # The web UI does not watch its parent itself: the kernel's SIGTERM (set up by the site) stops it. The store
    # starts once the scheduler listens, and registers with it.
    text = f'[scheduler]\naddress = "{free_local_address()}"\n[store]\n[ui]\nport = {free_port()}\n'
    site = RunningSite(site_file(tmp_path, text), tmp_path)
    try:
        site.wait_until("scaler: the site is up")
        said = site.said()
        assert said.index("scaler: scheduler is up") < said.index("scaler: store is up"), said
        started = site.descendants()
        assert len(started) == 3, started
        site.process.kill()
        site.process.wait(timeout=EXIT_SECONDS)
    finally:
        site.stop()
    assert_gone(started)


def test_a_part_that_cannot_start_is_named_and_the_site_fails(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        site = RunningSite(site_file(tmp_path, f'[scheduler]\naddress = "{address}"\n[cluster]\n'), tmp_path)
        try:
            assert site.process.wait(timeout=UP_SECONDS) == 1, site.said()
        finally:
            site.stop()
    said = site.said()
    assert f"scaler: scheduler could not start: Scheduler: cannot listen on {address}" in said, said
    assert "cluster" not in said.partition("could not start")[2]  # never started: the scheduler was not up
    assert "Traceback" not in said


@pytest.mark.parametrize("command", [SITE, SCHEDULER], ids=["scaler", "scaler_scheduler"])
def test_a_bad_value_in_the_file_fails_fast_naming_file_key_and_rule(tmp_path: Path, command: str) -> None:
    path = site_file(tmp_path, '[scheduler]\naddress = "tcp://127.0.0.1:2345"\nio_threads = 0\n[cluster]\n')
    arguments = [path] if command == SITE else ["--config", path]
    completed = subprocess.run([command, *arguments], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert completed.returncode == 2
    assert f"{path}: [scheduler] io_threads = 0: must be a whole number at least 1 and at most 1024, got 0" in (
        completed.stderr
    )
    assert "Traceback" not in completed.stderr


def test_a_part_that_exits_is_named_with_its_status_and_last_lines(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        text = f'[scheduler]\naddress = "{free_local_address()}"\n[ui]\nhost = "127.0.0.1"\nport = {port}\n'
        site = RunningSite(site_file(tmp_path, text), tmp_path)
        try:
            assert site.process.wait(timeout=UP_SECONDS) == 1, site.said()
        finally:
            site.stop()
    said = site.said()
    assert "scaler: ui exited with status 1" in said, said
    assert f"scaler_ui: cannot serve on 127.0.0.1:{port}" in said.partition("ui exited with status 1")[2], said
    assert "scaler: every part has stopped" in said


def test_the_scheduler_and_cluster_commands_take_the_file_with_the_command_line_winning(tmp_path: Path) -> None:
    in_file, given = free_local_address(), free_local_address()
    path = site_file(
        tmp_path, f'[scheduler]\naddress = "{in_file}"\nlogging_level = "DEBUG"\n'
        f'[cluster]\naddress = "{in_file}"\nnum_of_workers = 3\nlogging_level = "INFO"\n'
    )
    log = tmp_path / "both.log"
    processes = []
    try:
        with open(log, "wb") as output:
            for command in (
                [SCHEDULER, "--config", path, "--logging-level", "INFO", given],  # INFO and the address: ours
                [console_script("scaler_cluster"), "--config", path, "-n", "1", given],  # 1 worker, not the 3
            ):
                processes.append(subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=tmp_path))
        deadline = time.monotonic() + UP_SECONDS
        while "all 1 workers registered" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline and all(p.poll() is None for p in processes), log.read_text()
            time.sleep(0.1)
        with Client(given) as client:
            assert client.submit(pow, 3, 2).result(timeout=60) == 9
        text = log.read_text(errors="replace")
        assert f"Scheduler: listening on {given}" in text and in_file not in text
        assert "[DEBUG]" not in text  # the command line's INFO beat the file's DEBUG
    finally:
        for process in reversed(processes):
            stop_process(process, 5.0)
