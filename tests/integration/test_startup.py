"""Start-up as a user meets it: a combo or a cluster is up when it returns, or says why not and leaves
nothing running; a scheduler that cannot start leaves the running one alone; workers with no scheduler
say so and fail; a process killed with SIGKILL leaves nothing that piles up; 1.9.x Cluster code runs.

Command lines run the installed console scripts (next to sys.executable), as a user runs them.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Callable

import psutil
import pytest

from scaler import Client, Cluster, SchedulerClusterCombo
from scaler.cluster import combo as combo_module
from scaler.cluster.combo import free_local_address
from scaler.errors import ClusterStartError
from scaler.scheduler.config import default_monitor_address
from scaler.ui.feed import MonitorSubscriber
from scaler.utility.zmq_config import ZMQConfig
from scaler.worker.config import WorkerConfig
from tests.conftest import console_script
from tests.integration.spawned import WAIT_SECONDS, start_scheduler


def my_children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def assert_no_new_process(before: set[int]) -> None:
    new = [psutil.Process(pid) for pid in my_children() - before if psutil.pid_exists(pid)]
    _, alive = psutil.wait_procs(new, timeout=10)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left running: {[(p.pid, p.cmdline()) for p in alive]}"


def monitor_path(address: str) -> str:
    return default_monitor_address(address).removeprefix("ipc://")


def workers_registered(scheduler_log: str) -> int:
    return len(re.findall(r"PeerRegistry: worker .* connected", scheduler_log))


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------- the combo


def test_combo_returns_once_the_scheduler_listens_and_every_worker_registered(tmp_path) -> None:
    log = tmp_path / "combo.log"
    with SchedulerClusterCombo(n_workers=2, logging_level="INFO", logging_paths=[str(log)]) as combo:
        # Nothing waited for: at return, the port accepts connections and both workers are known.
        port = int(combo.get_address().rpartition(":")[2])
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        assert workers_registered(log.read_text()) == 2, log.read_text()


def test_combo_on_a_busy_port_raises_naming_the_address_and_nobody_joins_the_other_scheduler(spawn) -> None:
    address = free_local_address()
    first = start_scheduler(spawn, address)
    before = my_children()
    with pytest.raises(ClusterStartError) as raised:
        SchedulerClusterCombo(address=address, n_workers=2)
    assert address in str(raised.value) and "in use" in str(raised.value).lower(), raised.value
    assert_no_new_process(before)
    assert workers_registered(first.log()) == 0, first.log()
    assert first.process.poll() is None


def test_a_port_the_combo_chose_taken_meanwhile_is_chosen_again_for_its_scheduler_and_workers(
    spawn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The combo starts its workers beside its scheduler when it chose the port: when someone took that port
    # in between, both start again at another, and none of them joined whoever holds the first.
    taken = free_local_address()
    holder = start_scheduler(spawn, taken)
    choices = iter([taken])
    monkeypatch.setattr(combo_module, "free_local_address", lambda: next(choices, None) or free_local_address())
    with SchedulerClusterCombo(n_workers=2, logging_level="ERROR") as combo:
        assert combo.get_address() != taken
        with Client(address=combo.get_address(), timeout_seconds=30) as client:
            assert client.submit(abs, -3).result(timeout=WAIT_SECONDS) == 3
    assert workers_registered(holder.log()) == 0, holder.log()


def test_combo_whose_scheduler_cannot_listen_raises_with_its_reason(tmp_path) -> None:
    address = f"ipc://{tmp_path}/no-such-directory/scheduler.sock"
    before = my_children()
    with pytest.raises(ClusterStartError, match=re.escape(address)) as raised:
        SchedulerClusterCombo(address=address, n_workers=1)
    assert "cannot listen" in str(raised.value)
    assert_no_new_process(before)


def test_combo_not_ready_within_its_start_timeout_raises_and_stops_what_it_started() -> None:
    before = my_children()
    with pytest.raises(ClusterStartError, match=r"not ready within 0\.01s"):
        SchedulerClusterCombo(n_workers=1, start_timeout_seconds=0.01)
    assert_no_new_process(before)


def test_a_program_using_the_combo_is_not_flooded_with_log_lines(python_env: dict[str, str]) -> None:
    program = (
        "from scaler import Client, SchedulerClusterCombo\n"
        "with SchedulerClusterCombo(n_workers=2) as cluster:\n"
        "    with Client(address=cluster.get_address()) as client:\n"
        "        print(client.submit(pow, 2, 10).result())\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env=python_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1024\n", f"the program's output is not its own:\n{done.stdout}"
    assert "[INFO]" not in done.stderr, done.stderr


# ---------------------------------------------------------------------------------------------- Cluster


def test_cluster_start_returns_once_every_worker_registered(spawn) -> None:
    address = free_local_address()
    scheduler = start_scheduler(spawn, address)
    cluster = Cluster(WorkerConfig(address=address), ["a", "b"])
    try:
        cluster.start()
        assert workers_registered(scheduler.log()) == 2, scheduler.log()
    finally:
        cluster.shutdown()
    assert not cluster.is_alive()


@pytest.mark.parametrize(
    ("death_timeout", "start_timeout", "cause"),
    [(1.0, 60.0, r"no scheduler answered at .* within 1s"), (300.0, 1.0, r"0 of 1 workers registered .* within 1s")],
    ids=["worker_gives_up", "start_timeout"],
)
def test_cluster_start_without_a_scheduler_raises_naming_the_address(
    death_timeout: float, start_timeout: float, cause: str
) -> None:
    address = free_local_address()  # nobody listens there
    # No store: its start is not what this checks, and a start timeout of 1 s bounds it too, which a loaded
    # machine's store can outlast (then start() fails on the store instead, before any worker could register).
    cluster = Cluster(
        WorkerConfig(address=address, death_timeout_seconds=death_timeout), ["a"], start_timeout_seconds=start_timeout,
        store=None,
    )
    with pytest.raises(ClusterStartError, match=re.escape(address)) as raised:
        cluster.start()
    assert re.search(cause, str(raised.value)), raised.value
    assert not cluster.is_alive(), "start() that raised must leave no worker running"


def square(value: int) -> int:
    return value * value


def parent_pid() -> int:
    return os.getppid()


def test_cluster_made_as_in_1_9_runs_tasks_and_stops_as_a_process_did(spawn) -> None:
    """Scaler 1.9.x's examples/simple_cluster.py, pointed at a real scheduler, with a task run on it."""
    address = free_local_address()
    start_scheduler(spawn, address)
    cluster = Cluster(
        worker_io_threads=1,
        address=ZMQConfig.from_string(address),
        worker_names=[str(index) for index in range(2)],
        heartbeat_interval_seconds=2,
        task_timeout_seconds=0,
        death_timeout_seconds=300,
        garbage_collect_interval_seconds=30,
        trim_memory_threshold_bytes=1024 * 1024 * 1024,
        hard_processor_suspend=False,
        event_loop="builtin",
        logging_paths=("/dev/stdout",),
        logging_level="WARNING",
        logging_config_file=None,
    )
    cluster.start()
    try:
        assert cluster.is_alive()
        with Client(address=address, timeout_seconds=30) as client:
            assert client.map(square, [(i,) for i in range(20)]) == [i * i for i in range(20)]
            # The task ran in a processor of one of this cluster's workers.
            assert client.submit(parent_pid).result(timeout=30) in cluster.worker_pids
        cluster.terminate()
        cluster.join(timeout=30)
        assert not cluster.is_alive()
        assert cluster.exitcode == 0
        cluster.close()
    finally:
        cluster.shutdown()


def test_cluster_takes_a_config_or_the_1_9_keywords_not_both() -> None:
    with pytest.raises(TypeError, match="not both"):
        Cluster(WorkerConfig(address="tcp://127.0.0.1:2345"), ["a"], heartbeat_interval_seconds=1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        Cluster(address="tcp://127.0.0.1:2345", worker_names=["a"], heartbeat_seconds=1)
    with pytest.raises(ValueError, match="heartbeat_interval_seconds"):
        Cluster(address="tcp://127.0.0.1:2345", worker_names=["a"], heartbeat_interval_seconds=-2)
    with pytest.raises(ValueError, match="port"):
        Cluster(address="tcp://127.0.0.1:99999", worker_names=["a"])


# ---------------------------------------------------------------------------------------------- monitor socket


@pytest.mark.parametrize("second", ["scaler_scheduler", "combo"])
def test_a_scheduler_that_cannot_start_leaves_the_running_one_its_monitor(spawn, second: str) -> None:
    address = free_local_address()
    first = start_scheduler(spawn, address)
    inode = os.stat(monitor_path(address)).st_ino
    if second == "scaler_scheduler":
        other = spawn("second", [console_script("scaler_scheduler"), address])
        assert other.wait_exit() != 0, other.log()
        assert "in use" in other.log().lower(), other.log()
    else:
        with pytest.raises(ClusterStartError):
            SchedulerClusterCombo(address=address, n_workers=1)
    assert os.stat(monitor_path(address)).st_ino == inode, "the running scheduler's monitor socket was replaced"
    with MonitorSubscriber(default_monitor_address(address)) as feed:
        assert feed.receive(timeout_seconds=WAIT_SECONDS) is not None, "scaler_top would see nothing"
    assert first.process.poll() is None


def test_a_scheduler_never_takes_over_a_live_monitor_address(spawn) -> None:
    first_address, second_address = free_local_address(), free_local_address()
    start_scheduler(spawn, first_address, name="first")
    monitor = default_monitor_address(first_address)
    inode = os.stat(monitor_path(first_address)).st_ino
    second = start_scheduler(spawn, second_address, "--monitor-address", monitor, name="second")
    assert "monitor feed is off" in second.log(), second.log()
    second.process.send_signal(signal.SIGTERM)
    assert second.wait_exit() == 0, second.log()
    assert os.stat(monitor_path(first_address)).st_ino == inode, "the second scheduler took or removed the socket"
    with MonitorSubscriber(monitor) as feed:
        assert feed.receive(timeout_seconds=WAIT_SECONDS) is not None


# ---------------------------------------------------------------------------------------------- no scheduler


def test_scaler_cluster_without_a_scheduler_warns_then_fails_at_the_death_timeout(spawn) -> None:
    address = free_local_address()  # nobody listens there
    # The cluster warns 5 s after its start (scaler/cluster/cluster.py): the death timeout comes after that.
    cluster = spawn("cluster", [console_script("scaler_cluster"), "-n", "1", "-ds", "7", address])
    text = cluster.wait_for_log("[WARNING]")
    warning = next(line for line in text.splitlines() if line.startswith("[WARNING]"))
    assert address in warning, warning
    assert cluster.wait_exit() == 1, cluster.log()
    errors = [line for line in cluster.log().splitlines() if line.startswith("[ERROR]")]
    assert any(address in line and "7s" in line for line in errors), cluster.log()


def test_workers_without_keys_for_a_curve_scheduler_fail_at_the_death_timeout(spawn, tmp_path) -> None:
    """A handshake that always fails must not block the worker's loop: the death timeout still ends it."""
    keys, authorized = tmp_path / "keys", tmp_path / "authorized"
    subprocess.run([console_script("scaler_keygen"), str(keys), "scheduler", "worker"], check=True,
                   capture_output=True, timeout=60)
    authorized.mkdir()
    (authorized / "worker.key").write_bytes((keys / "worker.key").read_bytes())
    address = free_local_address()
    start_scheduler(spawn, address, "--curve-secret-key", str(keys / "scheduler.key_secret"),
                    "--curve-authorized-keys", str(authorized))
    cluster = spawn("cluster", [console_script("scaler_cluster"), "-n", "1", "-ds", "3", address])
    assert cluster.wait_exit() == 1, cluster.log()
    assert "[ERROR]" in cluster.log()
    # The store cannot reach the scheduler either: its heartbeats find no connection, which is no crash (it
    # leaves at its own death timeout).
    assert "Traceback" not in cluster.log(), cluster.log()


# ---------------------------------------------------------------------------------------------- SIGKILL


def test_a_sigkilled_scheduler_leaves_a_monitor_socket_the_next_scheduler_removes(spawn) -> None:
    killed_address = free_local_address()
    killed = start_scheduler(spawn, killed_address, name="killed")
    os.kill(killed.pid, signal.SIGKILL)
    killed.process.wait(timeout=WAIT_SECONDS)
    stale = monitor_path(killed_address)
    assert os.path.exists(stale), "nothing to clean up: the test proves nothing"
    start_scheduler(spawn, free_local_address(), name="next")
    wait_until(lambda: not os.path.exists(stale), f"{stale} is still there after the next scheduler started")


def processors_of(agent: psutil.Process) -> list[psutil.Process]:
    return [p for p in agent.children() if "scaler.worker.processor" in " ".join(p.cmdline())]


def test_a_sigkilled_worker_leaves_files_the_next_worker_removes(spawn) -> None:
    address = free_local_address()
    start_scheduler(spawn, address)
    first = spawn("first", [console_script("scaler_cluster"), "-n", "1", address])
    first.wait_for_log("connected to the scheduler")
    agent = next(p for p in psutil.Process(first.pid).children() if "scaler.worker.agent" in " ".join(p.cmdline()))
    wait_until(lambda: bool(processors_of(agent)), "the worker started no processor")
    # The processor is given its running-task slot inside the agent's private directory.
    slot_path = next(arg for arg in processors_of(agent)[0].cmdline() if "running_task_" in arg)
    work_dir = os.path.dirname(slot_path)
    processors = processors_of(agent)
    agent.kill()
    psutil.wait_procs([agent, *processors], timeout=WAIT_SECONDS)
    assert os.path.isdir(work_dir), "nothing was left behind: the test proves nothing"

    second = spawn("second", [console_script("scaler_cluster"), "-n", "1", address])
    second.wait_for_log("connected to the scheduler")
    wait_until(lambda: not os.path.exists(work_dir), f"{work_dir} is still there after the next worker started")

