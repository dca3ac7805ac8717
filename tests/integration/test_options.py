"""Every bad option or address is answered where it is given: by the command line's parser (a short
message, exit status 2, nothing started) and by the Python entry points (ValueError at the call).
A value that passes can always be sent: none reaches the wire to kill the scheduler later.

Command lines run the installed console scripts (next to sys.executable), as a user runs them: each script's
first bad command line below as a process of its own, the others in a child forked from the test that calls
the same entry point (tests/integration/forked_command_line.py), which checks the same parser for a fraction
of an interpreter's start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from scaler import Client, Cluster, SchedulerClusterCombo
from scaler.cluster.combo import free_local_address
from scaler.errors import ConnectionFailedError
from scaler.protocol import messages as m
from scaler.scheduler.config import SchedulerConfig
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.scheduler_core import SchedulerCore
from scaler.worker.config import WorkerConfig
from tests.integration.forked_command_line import run_forked

SCRIPTS_DIR = os.path.dirname(sys.executable)
WAIT_SECONDS = 60.0  # upper bounds against hangs on a loaded machine, never expectations
ADDRESS = "tcp://127.0.0.1:2345"  # never listened on: each bad command line must stop before it starts


def console_script(name: str) -> str:
    return os.path.join(SCRIPTS_DIR, name)


def run_script(
    script: str, args: list[str], env: dict[str, str], forked: bool = False
) -> subprocess.CompletedProcess:
    """The console script as a process of its own, or (`forked`) its entry point in a forked child."""
    try:
        if forked:
            return run_forked(script, args, env, WAIT_SECONDS)
        return subprocess.run([console_script(script), *args], capture_output=True, text=True, timeout=WAIT_SECONDS,
                              env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(f"{script} {args} was accepted and ran:\n{expired.stdout!r}") from None


# ---------------------------------------------------------------------------------------------- command lines

BAD_COMMAND_LINES = [
    ("scaler_scheduler", ["-ct", "-1", ADDRESS], "--client-timeout-seconds"),
    ("scaler_scheduler", ["-ct", "0", ADDRESS], "--client-timeout-seconds"),
    ("scaler_scheduler", ["-hi", "-2", ADDRESS], "--heartbeat-interval-seconds"),
    ("scaler_scheduler", ["-wt", "-5", ADDRESS], "--worker-timeout-seconds"),
    ("scaler_scheduler", ["-wt", "nan", ADDRESS], "--worker-timeout-seconds"),
    ("scaler_scheduler", ["-wt", "1e12", ADDRESS], "--worker-timeout-seconds"),
    ("scaler_scheduler", ["-ot", "0", ADDRESS], "--object-retention-seconds"),
    ("scaler_scheduler", ["-ls", "-1", ADDRESS], "--load-balance-seconds"),
    ("scaler_scheduler", ["-lbt", "0", ADDRESS], "--load-balance-trigger-times"),
    ("scaler_scheduler", ["-qs", "-1", ADDRESS], "--per-worker-queue-size"),
    ("scaler_scheduler", ["-mt", "-2", ADDRESS], "--max-number-of-tasks-waiting"),
    ("scaler_scheduler", ["-it", "0", ADDRESS], "--io-threads"),
    ("scaler_scheduler", ["--max-task-crashes", "0", ADDRESS], "--max-task-crashes"),
    ("scaler_scheduler", ["--max-message-size-bytes", "10", ADDRESS], "--max-message-size-bytes"),
    ("scaler_scheduler", ["--max-control-frame-bytes", "0", ADDRESS], "--max-control-frame-bytes"),
    ("scaler_scheduler", ["-e", "tokio", ADDRESS], "--event-loop"),
    ("scaler_scheduler", ["--monitor-address", "http://127.0.0.1:80", ADDRESS], "--monitor-address"),
    ("scaler_scheduler", ["tcp://127.0.0.1:99999"], "address"),
    ("scaler_scheduler", ["tcp://127.0.0.1:0"], "address"),
    ("scaler_scheduler", ["--curve-secret-key", "/nonexistent", ADDRESS], "--curve-secret-key"),
    ("scaler_scheduler", ["--curve-authorized-keys", "/nonexistent", ADDRESS], "--curve-authorized-keys"),
    ("scaler_scheduler", ["--logging-paths", "/nonexistent/dir/x.log", ADDRESS], "--logging-paths"),
    ("scaler_scheduler", ["--logging-config-file", "/nonexistent.conf", ADDRESS], "--logging-config-file"),
    ("scaler_scheduler", ["--logging-paths", ADDRESS], "--logging-paths"),
    ("scaler_scheduler", ["--logging-level", "LOUD", ADDRESS], "--logging-level"),
    ("scaler_cluster", ["-n", "0", ADDRESS], "--num-of-workers"),
    ("scaler_cluster", ["-wtqs", "0", ADDRESS], "--per-worker-task-queue-size"),
    ("scaler_cluster", ["-mp", "0", ADDRESS], "--max-processors"),
    ("scaler_cluster", ["-hi", "0", ADDRESS], "--heartbeat-interval"),
    ("scaler_cluster", ["-tts", "-1", ADDRESS], "--task-timeout-seconds"),
    ("scaler_cluster", ["-ml", "-1", ADDRESS], "--memory-limit-bytes"),
    ("scaler_cluster", ["-ds", "-3", ADDRESS], "--death-timeout-seconds"),
    ("scaler_cluster", ["-gc", "0", ADDRESS], "--garbage-collect-interval-seconds"),
    ("scaler_cluster", ["-tm", "-1", ADDRESS], "--trim-memory-threshold-bytes"),
    ("scaler_cluster", ["-it", "0", ADDRESS], "--io-threads"),
    ("scaler_cluster", ["-el", "tokio", ADDRESS], "--event-loop"),
    ("scaler_cluster", ["-wn", "a,,b", "-n", "3", ADDRESS], "--worker-names"),
    ("scaler_cluster", ["--tags", "gpu,,fast", ADDRESS], "--tags"),
    ("scaler_cluster", ["--curve-server-key", "/nonexistent", ADDRESS], "--curve-server-key"),
    ("scaler_cluster", ["--curve-secret-key", "/nonexistent", ADDRESS], "--curve-secret-key"),
    ("scaler_cluster", ["--logging-paths", "/nonexistent/dir/x.log", ADDRESS], "--logging-paths"),
    ("scaler_cluster", ["tcp://127.0.0.1:99999"], "address"),
    ("scaler_cluster", ["--store-capacity-bytes", "-1", ADDRESS], "--store-capacity-bytes"),
    ("scaler_cluster", ["--data-address", "tcp://0.0.0.0", ADDRESS], "--data-address"),
    ("scaler_cluster", ["--data-address", "ipc:///tmp/x", ADDRESS], "--data-address"),
    ("scaler_worker", ["-hi", "-2", ADDRESS], "--heartbeat-interval"),
    ("scaler_top", ["tcp://127.0.0.1:99999"], "address"),
    ("scaler_top", ["http://127.0.0.1:80"], "address"),
    ("scaler_ui", ["ipc:///tmp/x_monitor", "--port", "70000"], "--port"),
    ("scaler_ui", ["ipc:///tmp/x_monitor", "--port", "-1"], "--port"),
    ("scaler_ui", ["tcp://127.0.0.1:99999"], "address"),
    ("scaler_ui", ["--logging-paths", "/nonexistent/dir/x.log", "ipc:///tmp/x_monitor"], "--logging-paths"),
    ("scaler_keygen", ["/tmp", "../escape"], "names"),
    ("scaler_keygen", ["/dev/null", "worker"], "directory"),
]

# The first bad command line of each script runs the installed console script; the rest run forked.
STARTED_AS_PROCESSES = [
    (script, args) for index, (script, args, _) in enumerate(BAD_COMMAND_LINES)
    if script not in {earlier for earlier, _, _ in BAD_COMMAND_LINES[:index]}
]


@pytest.mark.parametrize(
    ("script", "args", "option"), BAD_COMMAND_LINES,
    ids=[f"{script}:{' '.join(args)}" for script, args, _ in BAD_COMMAND_LINES],
)
def test_a_bad_option_is_a_short_parser_error(script: str, args: list[str], option: str, python_env) -> None:
    done = run_script(script, args, python_env, forked=(script, args) not in STARTED_AS_PROCESSES)
    assert done.returncode == 2, f"exit status {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    error_line = done.stderr.strip().splitlines()[-1]
    assert error_line.startswith(f"{script}: error:") and option in error_line, done.stderr
    assert f"{option}: {option}:" not in error_line, "the option is named twice"
    assert done.stdout == "", "nothing may start or log before the command line is right"


def test_a_wrong_number_of_worker_names_is_a_parser_error(python_env) -> None:
    done = run_script("scaler_cluster", ["-wn", "a,b", "-n", "3", ADDRESS], python_env, forked=True)
    assert done.returncode == 2 and "2 worker names given for 3 workers" in done.stderr, done.stderr


def spawn_scheduler(args: list[str], log_path: str, env: dict[str, str]) -> subprocess.Popen:
    with open(log_path, "wb") as out:
        return subprocess.Popen([console_script("scaler_scheduler"), *args], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)


def stop(process: subprocess.Popen) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


@pytest.mark.parametrize(
    "layout",
    ["paths_then_address", "two_paths_then_address", "address_then_paths", "paths_dash_dash_address"],
)
def test_logging_paths_and_the_address_in_either_order(layout: str, tmp_path, python_env) -> None:
    address = free_local_address()
    first, second = str(tmp_path / "a.log"), str(tmp_path / "b.log")
    args = {
        "paths_then_address": ["--logging-paths", first, address],
        "two_paths_then_address": ["--logging-paths", first, second, address],
        "address_then_paths": [address, "--logging-paths", first],
        "paths_dash_dash_address": ["--logging-paths", first, "--", address],
    }[layout]
    environment = dict(python_env)
    environment.pop("SCALER_EXIT_WITH_PARENT", None)
    scheduler = spawn_scheduler(args, str(tmp_path / "console.log"), environment)
    try:
        with Client(address=address, timeout_seconds=WAIT_SECONDS) as client:  # it listens where it was told
            assert client.address == address
    finally:
        assert stop(scheduler) == 0, (tmp_path / "console.log").read_text()
    assert f"listening on {address}" in open(first).read()
    if layout == "two_paths_then_address":
        assert f"listening on {address}" in open(second).read()


def test_event_loop_option_is_said_to_have_no_effect_only_when_given(tmp_path, python_env) -> None:
    environment = dict(python_env)
    environment.pop("SCALER_EXIT_WITH_PARENT", None)
    logs = {}
    for name, options in (("given", ["--event-loop", "uvloop"]), ("default", [])):
        address = free_local_address()
        log_path = tmp_path / f"{name}.log"
        scheduler = spawn_scheduler([*options, address], str(log_path), environment)
        try:
            with Client(address=address, timeout_seconds=WAIT_SECONDS):
                pass
        finally:
            stop(scheduler)
        logs[name] = log_path.read_text()
    given = [line for line in logs["given"].splitlines() if "event loop" in line or "event-loop" in line]
    assert len(given) == 1 and "no effect" in given[0], logs["given"]
    assert "use event loop: uvloop" not in logs["given"]
    assert "event loop" not in logs["default"] and "event-loop" not in logs["default"], logs["default"]


def test_cluster_says_once_per_given_option_that_it_has_no_effect(tmp_path, python_env) -> None:
    """The 1.9.x worker options that change nothing are each named once in the log when given, never otherwise."""
    environment = dict(python_env)
    environment.pop("SCALER_EXIT_WITH_PARENT", None)
    ignored = ["--garbage-collect-interval-seconds", "--trim-memory-threshold-bytes", "--hard-processor-suspend",
               "--event-loop"]
    logs = {}
    for name, options in (("given", ["-gc", "10", "-tm", "0", "-hps", "-el", "uvloop"]), ("default", [])):
        log_path = tmp_path / f"{name}.log"
        # No scheduler answers: the workers give up after the death timeout, and the cluster exits.
        done = run_script("scaler_cluster", [*options, "-n", "1", "-ds", "1", "-lp", str(log_path),
                                             "--", free_local_address()], environment)
        assert done.returncode == 1, done.stderr
        logs[name] = log_path.read_text()
    for option in ignored:
        said = [line for line in logs["given"].splitlines() if option in line]
        assert len(said) == 1 and "has no effect" in said[0], logs["given"]
        assert option not in logs["default"], logs["default"]


# ---------------------------------------------------------------------------------------------- Python entry points


COMBO_BAD_SETTINGS = [
    ({"client_timeout_seconds": -1}, "client_timeout_seconds"),
    ({"heartbeat_interval_seconds": -2}, "heartbeat_interval_seconds"),
    ({"worker_timeout_seconds": -5}, "worker_timeout_seconds"),
    ({"death_timeout_seconds": 0}, "death_timeout_seconds"),
    ({"n_workers": 0}, "n_workers"),
    ({"per_worker_queue_size": -1}, "per_worker_queue_size|task_queue_size"),
    ({"address": "tcp://127.0.0.1:99999"}, "port"),
    ({"address": "http://127.0.0.1:80"}, "not a ZeroMQ address"),
    ({"event_loop": "tokio"}, "event_loop"),
    ({"logging_level": "LOUD"}, "logging_level"),
    ({"logging_paths": ["/nonexistent/dir/x.log"]}, "logging_paths"),
]


@pytest.mark.parametrize(("settings", "match"), COMBO_BAD_SETTINGS, ids=[match for _, match in COMBO_BAD_SETTINGS])
def test_combo_refuses_a_bad_setting_before_starting_anything(settings: dict, match: str) -> None:
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    with pytest.raises(ValueError, match=match):
        SchedulerClusterCombo(**settings)
    assert {child.pid for child in psutil.Process().children(recursive=True)} <= before


@pytest.mark.parametrize(
    ("settings", "match"),
    [({"event_loop": "tokio"}, "event_loop"), ({"garbage_collect_interval_seconds": 0}, "garbage_collect_interval"),
     ({"trim_memory_threshold_bytes": -1}, "trim_memory_threshold_bytes")],
)
def test_cluster_checks_the_1_9_keywords_it_ignores(settings: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Cluster(address=ADDRESS, worker_names=["a"], **settings)


def test_combo_checks_the_1_9_keywords_it_ignores() -> None:
    with pytest.raises(ValueError, match="object_retention_seconds"):
        SchedulerClusterCombo(object_retention_seconds=0)


@pytest.mark.parametrize(
    ("address", "timeout"),
    [("http://127.0.0.1:80", 3), ("tcp://127.0.0.1:99999", 3), ("tcp://127.0.0.1", 3), ("127.0.0.1:2345", 3),
     ("tcp://127.0.0.1:2345", -1), ("tcp://127.0.0.1:2345", 0), ("tcp://127.0.0.1:2345", float("nan"))],
)
def test_client_refuses_a_bad_address_or_timeout_at_the_call(address: str, timeout: float) -> None:
    with pytest.raises(ValueError):
        Client(address, timeout_seconds=timeout)


def test_configs_hold_every_number_to_its_rule() -> None:
    with pytest.raises(ValueError, match="worker_timeout_seconds"):
        SchedulerConfig(address=ADDRESS, worker_timeout_seconds=-5)
    with pytest.raises(ValueError, match="task_queue_size"):
        WorkerConfig(address=ADDRESS, task_queue_size=2**40)
    with pytest.raises(TypeError, match="io_threads"):
        WorkerConfig(address=ADDRESS, io_threads=1.5)


@pytest.mark.parametrize("seconds", [-5.0, 0.0, 1e12, float("inf")])
def test_the_scheduler_core_welcomes_whatever_its_timeouts(seconds: float) -> None:
    """A core made without SchedulerConfig's checks must still encode its Welcome, not die on it."""
    core = SchedulerCore(CoreConfig(worker_timeout_seconds=seconds, client_timeout_seconds=seconds,
                                    heartbeat_interval_seconds=seconds))
    for identity, role in ((b"worker", m.Role.WORKER), (b"client", m.Role.CLIENT)):
        replies = core.on_message(identity, m.Hello(role=role, name="peer", hostname="host", pid=1, capacity=10), 0.0)
        welcomes = [message for _, message in replies if isinstance(message, m.Welcome)]
        assert len(welcomes) == 1, replies
        m.encode(welcomes[0])  # raised KjException "Value out-of-range for requested type" before


def test_client_against_a_curve_scheduler_without_keys_fails_and_leaves_no_thread(tmp_path, python_env) -> None:
    keys, authorized = tmp_path / "keys", tmp_path / "authorized"
    subprocess.run([console_script("scaler_keygen"), str(keys), "scheduler", "client"], check=True,
                   capture_output=True, timeout=WAIT_SECONDS)
    authorized.mkdir()
    (authorized / "client.key").write_bytes((keys / "client.key").read_bytes())
    address = free_local_address()
    environment = dict(python_env)
    environment.pop("SCALER_EXIT_WITH_PARENT", None)
    for variable in ("SCALER_CURVE_SERVER_KEY", "SCALER_CURVE_SECRET_KEY"):
        environment.pop(variable, None)
    log_path = tmp_path / "scheduler.log"
    scheduler = spawn_scheduler(
        ["--curve-secret-key", str(keys / "scheduler.key_secret"), "--curve-authorized-keys", str(authorized),
         address], str(log_path), environment,
    )
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while "listening on" not in log_path.read_text():
            assert scheduler.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        # Said at once, from the handshake, not as an unreachable scheduler at the timeout.
        with pytest.raises(ConnectionFailedError, match="requires CURVE keys"):
            Client(address, timeout_seconds=3)
        # Its I/O thread did not stay stuck in a send that no connection will ever take.
        stuck = [thread for thread in threading.enumerate() if thread.name == "scaler-client-io" and thread.is_alive()]
        assert not stuck
    finally:
        stop(scheduler)
