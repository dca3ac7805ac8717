"""The console scripts as a user runs them: `scaler_scheduler ADDRESS` and `scaler_cluster -n N ADDRESS`.

Every process started here is a child of the test, logs to a file under tmp_path, and is terminated and
reaped in a `finally`; the grandchildren (workers, processors) are checked for separately.

Each script's `-h` runs once as a process, its text shared by the tests that read it; of the bad addresses,
the first runs each script as a process, the others its entry point in a child forked from the test
(tests/integration/forked_command_line.py): the same parser, without an interpreter's start per line.
"""

from __future__ import annotations

import functools
import operator
import os
import re
import signal
import subprocess
import time

import psutil
import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.errors import ProtectedModeError
from tests.conftest import console_script
from tests.integration.forked_command_line import run_forked
from tests.integration.spawned import Spawner, start_scheduler

SCHEDULER = [console_script("scaler_scheduler")]
CLUSTER = [console_script("scaler_cluster")]

STARTUP_SECONDS = 30.0
EXIT_SECONDS = 10.0  # "within a few seconds": generous for a loaded machine, still bounded

# `[INFO]2024-05-01 12:00:00+0000: message`, as the documentation shows.
LOG_LINE = re.compile(r"^\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\]\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[+-]\d{4}: \S.*$")


# ---------------------------------------------------------------------------------------------- helpers


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose command line contains `text`, e.g. a scheduler address."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE or process.pid == os.getpid():
                continue
            if text in " ".join(process.info["cmdline"] or ()):
                found.append(process)
        except psutil.Error:
            continue
    return found


def assert_all_gone(processes: list[psutil.Process], address: str) -> None:
    _, alive = psutil.wait_procs(processes, timeout=EXIT_SECONDS)
    alive = [p for p in alive if _is_live(p)]
    assert not alive, f"left behind: {[(p.pid, _cmdline(p)) for p in alive]}"
    deadline = time.monotonic() + EXIT_SECONDS
    while (survivors := processes_mentioning(address)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not survivors, f"left behind: {[(p.pid, _cmdline(p)) for p in survivors]}"


def _is_live(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return "?"


def port_of(address: str) -> str:
    return address.rpartition(":")[2]


def option_blocks(help_text: str) -> dict[str, str]:
    """`--long-name` -> its entry in `-h` (the option line and its continuation lines), whitespace flattened."""
    blocks: dict[str, str] = {}
    names: list[str] = []
    lines: list[str] = []

    def flush() -> None:
        for name in names:
            blocks[name] = " ".join(" ".join(lines).split())

    for line in help_text.splitlines():
        if line.startswith("  -"):
            flush()
            option_strings = line.strip().split("  ")[0]  # the help column starts after two spaces
            names = re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", option_strings)
            lines = [line]
        elif names and line.startswith("    "):
            lines.append(line)
        else:
            flush()
            names, lines = [], []
    flush()
    return blocks


# ---------------------------------------------------------------------------------------------- console scripts


@functools.cache
def _help_of(script: str, environment: tuple[tuple[str, str], ...]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [console_script(script), "-h"], capture_output=True, text=True, timeout=60, env=dict(environment)
    )


def help_of(script: str, python_env: dict[str, str]) -> subprocess.CompletedProcess:
    """`script -h` as a process, run once per script and environment: its output does not change in between."""
    return _help_of(script, tuple(sorted(python_env.items())))


SCHEDULER_OPTIONS = [
    "--io-threads", "--max-number-of-tasks-waiting", "--client-timeout-seconds", "--worker-timeout-seconds",
    "--object-retention-seconds", "--load-balance-seconds", "--per-worker-queue-size", "--event-loop",
    "--protected", "--logging-paths", "--logging-level", "--logging-config-file", "--monitor-address", "--config",
]
CLUSTER_OPTIONS = [
    "--num-of-workers", "--worker-names", "--heartbeat-interval", "--task-timeout-seconds",
    "--death-timeout-seconds", "--garbage-collect-interval-seconds", "--trim-memory-threshold-bytes",
    "--hard-processor-suspend", "--event-loop", "--io-threads", "--logging-paths", "--per-worker-task-queue-size",
    "--store-capacity-bytes", "--data-address", "--no-store", "--no-borrowing", "--config",
]


@pytest.mark.parametrize(
    ("script", "options"),
    [("scaler_scheduler", SCHEDULER_OPTIONS), ("scaler_cluster", CLUSTER_OPTIONS), ("scaler_worker", CLUSTER_OPTIONS)],
)
def test_help_lists_every_option_with_its_default(script: str, options: list[str], python_env) -> None:
    done = help_of(script, python_env)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "address" in done.stdout
    blocks = option_blocks(done.stdout)
    for option in options:
        assert option in blocks, f"{option} missing from {script} -h:\n{done.stdout}"
    # A switch whose absence is the default (--no-store, --hard-processor-suspend) states none; an option nobody
    # needs to give (the CURVE keys, --tags, the logging config file, a config file, --standby-of for a scheduler that
    # is no standby) has none to state.
    no_default = {"--help", "--no-store", "--no-borrowing", "--hard-processor-suspend", "--tags", "--curve-secret-key",
                  "--curve-server-key", "--curve-authorized-keys", "--logging-config-file", "--config", "--version",
                  "--standby-of"}
    for option, text in blocks.items():
        if option not in no_default:
            assert "(default:" in text, f"{script} -h does not show the default of {option}: {text!r}"


@pytest.mark.parametrize("script", ["scaler_scheduler", "scaler_cluster"])
def test_help_shows_one_default_per_option(script: str, python_env) -> None:
    """Two "(default: ...)" in one entry contradict each other, e.g. "(default: X) (default: None)"."""
    done = help_of(script, python_env)
    doubled = {option: text for option, text in option_blocks(done.stdout).items() if text.count("(default:") > 1}
    assert not doubled, f"{script} -h shows two defaults for: {doubled}"


@pytest.mark.parametrize(
    "script",
    ["scaler_scheduler", "scaler_cluster", "scaler_top", "scaler_ui", "scaler_slurm_cluster",
     "scaler_symphony_cluster"],
)
def test_help_states_no_default_that_misleads(script: str, python_env) -> None:
    """No "--no-store ... (default: True)" (it reads as if the store were off), no "(default: None)" on an
    address one must give, no empty or list-shaped default, and an item of a list said once."""
    done = help_of(script, python_env)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for wrong in ("(default: None)", "(default: )", "(default: [])", "(default: ('", "(default: True)",
                  "(default: False)", "default Guest) (default"):
        assert wrong not in text, f"{script} -h shows {wrong!r}:\n{done.stdout}"
    assert not re.search(r"default: [^()]*\) \(default:", text), done.stdout


def test_help_shows_the_documented_default_values(python_env) -> None:
    done = help_of("scaler_scheduler", python_env)
    blocks = option_blocks(done.stdout)
    assert "(default: -1)" in blocks["--max-number-of-tasks-waiting"]
    assert "(default: 60.0)" in blocks["--client-timeout-seconds"]
    assert "(default: 60.0)" in blocks["--worker-timeout-seconds"]
    assert "(default: 1000)" in blocks["--per-worker-queue-size"]
    assert "(default: --protected)" in blocks["--protected"]
    assert "(default: builtin)" in blocks["--event-loop"]
    assert "(default: INFO)" in blocks["--logging-level"]
    assert "/dev/stdout" in blocks["--logging-paths"]
    done = help_of("scaler_cluster", python_env)
    blocks = option_blocks(done.stdout)
    assert "(default: 300.0)" in blocks["--death-timeout-seconds"]
    assert "(default: 1000)" in blocks["--per-worker-task-queue-size"]
    assert "(default:" not in blocks["--hard-processor-suspend"]  # off unless given


# ---------------------------------------------------------------------------------------------- a real cluster


def square(x: int) -> int:
    return x * x


@pytest.mark.timeout(60)
def test_scheduler_and_cluster_from_the_command_line(spawn: Spawner) -> None:
    address = free_local_address()
    port = port_of(address)
    scheduler = start_scheduler(spawn, address)
    cluster = spawn("cluster", [*CLUSTER, "-n", "2", address])
    cluster.wait_for_log("Worker[1] started")

    with Client(address=address, timeout_seconds=30) as client:
        assert client.map(square, [(i,) for i in range(50)]) == [i * i for i in range(50)]
        assert client.submit(operator.add, 2, 3).result(timeout=30) == 5

    scheduler_log = scheduler.log()
    lines = [line for line in scheduler_log.splitlines() if line.strip()]
    assert lines, "the scheduler logged nothing"
    for line in lines:
        assert LOG_LINE.match(line), f"not in the documented log format: {line!r}"
    info = re.compile(r"^\[INFO\]\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[+-]\d{4}: (.*)$")
    messages = [match.group(1) for line in lines if (match := info.match(line))]
    assert "logging to ('/dev/stdout',)" in messages
    assert f"Scheduler: monitor address is ipc:///tmp/127.0.0.1_{port}_monitor" in messages

    cluster_log = cluster.log()
    cluster_messages = [match.group(1) for line in cluster_log.splitlines() if (match := info.match(line))]
    assert any(message.startswith("ClusterProcess: starting 2 workers") for message in cluster_messages), cluster_log
    assert "Worker[0] started" in cluster_messages and "Worker[1] started" in cluster_messages, cluster_log
    assert "Worker[2] started" not in cluster_log

    workers = cluster.descendants()
    assert len([p for p in workers if "scaler.worker.agent" in _cmdline(p)]) == 2, [_cmdline(p) for p in workers]

    cluster.process.send_signal(signal.SIGTERM)
    assert cluster.wait_exit() == 0, cluster.log()
    assert scheduler.process.poll() is None, "the scheduler must outlive its workers"
    scheduler.process.send_signal(signal.SIGTERM)
    assert scheduler.wait_exit() == 0, scheduler.log()
    assert_all_gone(workers, address)
    assert "Scheduler: stopped" in scheduler.log()


@pytest.mark.timeout(60)
def test_scaler_worker_serves_a_scheduler_like_scaler_cluster(spawn: Spawner) -> None:
    """The README's alias: `scaler_worker -n N ADDRESS` starts workers that run a client's tasks."""
    address = free_local_address()
    start_scheduler(spawn, address)
    workers = spawn("workers", [console_script("scaler_worker"), "-n", "1", address])
    workers.wait_for_log("Worker[0] started")
    with Client(address=address, timeout_seconds=30) as client:
        assert client.submit(square, 7).result(timeout=30) == 49
    workers.process.send_signal(signal.SIGTERM)
    assert workers.wait_exit() == 0, workers.log()


@pytest.mark.timeout(60)
def test_sigterm_to_both_at_once_leaves_nothing_behind(spawn: Spawner) -> None:
    address = free_local_address()
    scheduler = start_scheduler(spawn, address)
    cluster = spawn("cluster", [*CLUSTER, "-n", "2", address])
    cluster.wait_for_log("Worker[1] started")
    with Client(address=address, timeout_seconds=30) as client:
        assert client.map(square, [(i,) for i in range(10)]) == [i * i for i in range(10)]
    workers = cluster.descendants()
    assert workers

    scheduler.process.send_signal(signal.SIGTERM)
    cluster.process.send_signal(signal.SIGTERM)
    assert scheduler.wait_exit() == 0, scheduler.log()
    assert cluster.wait_exit() == 0, cluster.log()
    assert_all_gone(workers, address)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_lone_scheduler_exits_cleanly_on_a_signal(spawn: Spawner, signum: int) -> None:
    address = free_local_address()
    scheduler = start_scheduler(spawn, address)
    scheduler.process.send_signal(signum)
    assert scheduler.wait_exit() == 0, scheduler.log()
    assert "Scheduler: stopped" in scheduler.log()


# ---------------------------------------------------------------------------------------------- bad command lines

BAD_ADDRESSES = ["not-an-address", "127.0.0.1:2345", "tcp://127.0.0.1", "tcp://:2345", "http://127.0.0.1:80", "tcp://"]


@pytest.mark.parametrize("script", ["scaler_scheduler", "scaler_cluster"], ids=["scheduler", "cluster"])
@pytest.mark.parametrize("bad", BAD_ADDRESSES)
def test_bad_address_says_what_a_valid_one_looks_like(script: str, bad: str, python_env) -> None:
    if bad == BAD_ADDRESSES[0]:
        done = subprocess.run([console_script(script), bad], capture_output=True, text=True, timeout=60,
                              env=python_env)
    else:
        done = run_forked(script, [bad], python_env, timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert bad in done.stderr, done.stderr
    assert re.search(r"tcp://127\.0\.0\.1:\d+", done.stderr), f"no example of a valid address:\n{done.stderr}"
    assert done.stdout == ""


def test_worker_names_must_match_the_number_of_workers(python_env) -> None:
    address = free_local_address()
    done = subprocess.run(
        [*CLUSTER, "--worker-names", "a,b", "-n", "3", address], capture_output=True, text=True, timeout=60,
        env=python_env,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert re.search(r"\b2\b.*worker names.*\b3\b", done.stderr), done.stderr
    assert not processes_mentioning(address), "no worker may start when the command line is wrong"


def test_zero_workers_is_refused(python_env) -> None:
    done = subprocess.run([*CLUSTER, "-n", "0", free_local_address()], capture_output=True, text=True, timeout=60,
                          env=python_env)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert "at least 1" in done.stderr


def test_second_scheduler_on_a_busy_port_fails_and_the_first_keeps_serving(spawn: Spawner) -> None:
    address = free_local_address()
    first = start_scheduler(spawn, address, name="first")
    second = spawn("second", [*SCHEDULER, address])
    assert second.wait_exit(timeout=STARTUP_SECONDS) != 0
    assert "in use" in second.log().lower(), second.log()
    assert first.process.poll() is None
    cluster = spawn("cluster", [*CLUSTER, "-n", "1", address])
    cluster.wait_for_log("Worker[0] started")
    with Client(address=address, timeout_seconds=30) as client:
        assert client.submit(square, 9).result(timeout=30) == 81


# ---------------------------------------------------------------------------------------------- options at work


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("options", "accepted"),
    [([], False), (["--protected"], False), (["-p"], False), (["--no-protected"], True)],
    ids=["default", "flag", "short_flag", "no_protected"],
)
def test_protected_option_decides_whether_a_client_may_shut_down(
    spawn: Spawner, options: list[str], accepted: bool
) -> None:
    address = free_local_address()
    # flags before the address, as 1.9.x deployment scripts write them
    scheduler = spawn("scheduler", [*SCHEDULER, *options, address])
    scheduler.wait_for_log(f"listening on {address}")
    client = Client(address=address, timeout_seconds=30)
    if accepted:
        client.shutdown()
        assert scheduler.wait_exit() == 0, scheduler.log()
        assert "shutdown requested" in scheduler.log()
    else:
        with pytest.raises(ProtectedModeError, match="protected"):
            client.shutdown()
        # A new client still gets its welcome, so the scheduler is up and serving.
        with Client(address=address, timeout_seconds=30) as other:
            assert other.address == address
        assert scheduler.process.poll() is None, "a protected scheduler must keep running"


@pytest.mark.timeout(60)
def test_workers_exit_by_themselves_when_no_scheduler_answers(spawn: Spawner) -> None:
    address = free_local_address()  # nobody listens here
    cluster = spawn("cluster", [*CLUSTER, "-n", "1", "--death-timeout-seconds", "2", address])
    cluster.wait_for_log("Worker[0] started")
    workers = cluster.descendants()
    # "Within about 10 s": 2 s of silence, then the worker and the cluster stop; slack for a loaded machine.
    code = cluster.wait_exit(timeout=15)
    # A worker that never got a word has failed: a non-zero status (not a signal), and an ERROR saying why.
    assert code == 1, f"exit status {code}, not 1:\n{cluster.log()}"
    errors = [line for line in cluster.log().splitlines() if line.startswith("[ERROR]")]
    assert any(f"no scheduler answered at {address} within 2s" in line for line in errors), cluster.log()
    assert_all_gone(workers, address)


@pytest.mark.timeout(60)
def test_logging_paths_and_level_options(spawn: Spawner, tmp_path) -> None:
    address = free_local_address()
    log_file = tmp_path / "scheduler-file.log"
    scheduler = spawn("scheduler", [*SCHEDULER, address, "--logging-paths", str(log_file), "--logging-level", "DEBUG"])
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline and not (log_file.exists() and "listening on" in log_file.read_text()):
        assert scheduler.process.poll() is None, scheduler.log()
        time.sleep(0.05)
    text = log_file.read_text()
    assert f"listening on {address}" in text
    assert f"logging to ('{log_file}',)" in text
    assert "listening on" not in scheduler.log(), "the log went to the file only"
    for line in text.splitlines():
        assert LOG_LINE.match(line), line

    quiet = free_local_address()
    silent = spawn("silent", [*SCHEDULER, quiet, "--logging-level", "WARNING"])
    with Client(address=quiet, timeout_seconds=30) as client:  # connected means it is up
        client.disconnect()
    silent.process.send_signal(signal.SIGTERM)
    assert silent.wait_exit() == 0
    assert "[INFO]" not in silent.log(), silent.log()


def test_monitor_address_option_is_logged(spawn: Spawner, tmp_path) -> None:
    address = free_local_address()
    monitor = f"ipc://{tmp_path}/monitor"
    scheduler = start_scheduler(spawn, address, "--monitor-address", monitor)
    assert f"Scheduler: monitor address is {monitor}" in scheduler.log()
