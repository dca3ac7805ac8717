"""scaler_top used as a person would: in a terminal (tmux), against a live cluster, driven by keys.

Each test runs its own tmux server on a socket in its temporary folder, so it never touches a user's
tmux, and kills that server (and with it every process in its panes) at the end, whatever happened.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from typing import Callable, Iterator

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.cluster.combo import free_local_address
from scaler.scheduler.config import default_monitor_address
from scaler.store.store_client import StoreAddress, StoreClient
from tests.conftest import console_script
from tests.integration.client_backlog import BACKLOG, TwoClients
from tests.integration.spawned import Spawner, start_scheduler

TMUX = shutil.which("tmux")

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install -y tmux; .ci/run installs it)"),
]

WIDTH, HEIGHT = 160, 48
SORT_KEYS = {"n": "worker", "C": "agt_cpu", "M": "agt_rss", "c": "cpu", "m": "rss", "f": "free", "w": "sent",
             "d": "queued", "l": "lag"}


class Terminal:
    """One tmux server with one window of a fixed size running one command."""

    def __init__(self, command: str, environment: dict[str, str], socket_path: str, height: int = HEIGHT) -> None:
        assert TMUX is not None
        self.socket_path = socket_path
        self.session = "top"
        self._environment = environment
        self._tmux("new-session", "-d", "-s", self.session, "-x", str(WIDTH), "-y", str(height), command)

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [TMUX, "-S", self.socket_path, *args], env=self._environment, capture_output=True, text=True,
            timeout=10, check=check,
        )

    def screen(self) -> list[str]:
        return self._tmux("capture-pane", "-p", "-t", self.session).stdout.splitlines()

    def keys(self, *keys: str, literal: bool = True) -> None:
        self._tmux("send-keys", "-t", self.session, *(["-l"] if literal else []), *keys)

    def wait_for(self, condition: Callable[[list[str]], bool], what: str, seconds: float = 30.0) -> list[str]:
        deadline = time.monotonic() + seconds
        while True:
            screen = self.screen()
            if condition(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"the screen never showed {what}; it shows:\n" + "\n".join(screen))
            time.sleep(0.2)

    def kill(self) -> None:
        self._tmux("kill-server", check=False)


@pytest.fixture
def terminal_environment(python_env: dict[str, str]) -> dict[str, str]:
    environment = dict(python_env)
    environment.pop("TMUX", None)  # a test run from inside tmux must still start its own server
    # curses takes these over the terminal's own size; pytest-xdist sets them (24 x 80) in its workers.
    environment.pop("LINES", None)
    environment.pop("COLUMNS", None)
    environment["TERM"] = "xterm-256color"
    return environment


@pytest.fixture
def run_in_terminal(terminal_environment: dict[str, str], tmp_path) -> Iterator[Callable[[str], Terminal]]:
    terminals: list[Terminal] = []

    def start(address: str, height: int = HEIGHT) -> Terminal:
        exit_file = tmp_path / f"exit-{len(terminals)}"
        # After scaler_top ends the pane shows its exit code and stays open, so the test can read it.
        command = (
            f"{shlex.quote(console_script('scaler_top'))} {shlex.quote(address)}; "
            f"code=$?; echo $code > {shlex.quote(str(exit_file))}; echo \"scaler_top exited with $code\"; sleep 60"
        )
        terminal = Terminal(command, terminal_environment, str(tmp_path / f"tmux-{len(terminals)}.sock"), height)
        terminal.exit_file = exit_file  # type: ignore[attr-defined]
        terminals.append(terminal)
        return terminal

    try:
        yield start
    finally:
        for terminal in terminals:
            terminal.kill()


def worker_total(screen: list[str]) -> int:
    return next(index for index, line in enumerate(screen) if line.startswith("Total ") and line.endswith(" worker(s)"))


def header_of_worker_table(screen: list[str]) -> str:
    return screen[worker_total(screen) + 1]


def starred(screen: list[str]) -> list[str]:
    return [column[1:] for column in header_of_worker_table(screen).split() if column.startswith("*")]


def worker_names(screen: list[str]) -> list[str]:
    total = worker_total(screen)
    count = int(screen[total].split()[1])
    return [line.split()[0] for line in screen[total + 2: total + 2 + count]]


def exit_code(terminal: Terminal, seconds: float = 15.0) -> int:
    path = terminal.exit_file  # type: ignore[attr-defined]
    deadline = time.monotonic() + seconds
    while not path.exists() or not path.read_text().strip():
        if time.monotonic() > deadline:
            raise AssertionError("scaler_top did not exit; the screen shows:\n" + "\n".join(terminal.screen()))
        time.sleep(0.1)
    return int(path.read_text())


def test_top_shows_the_cluster_sorts_on_keys_and_quits_on_q(combo: SchedulerClusterCombo, run_in_terminal) -> None:
    terminal = run_in_terminal(default_monitor_address(combo.get_address()))
    screen = terminal.wait_for(lambda s: "Total 2 worker(s)" in s, "Total 2 worker(s)")
    for title in ("scheduler", "task_manager", "scheduler_sent", "scheduler_received"):
        assert title in screen[0]
    assert any(line.startswith("Shortcuts: worker[n] agt_cpu[C]") for line in screen)
    assert starred(screen) == ["cpu"]  # the default sort
    assert len(worker_names(screen)) == 2

    for key, column in SORT_KEYS.items():
        terminal.keys(key)
        screen = terminal.wait_for(lambda s, c=column: starred(s) == [c], f"*{column} after pressing {key}")
    terminal.keys("n")
    screen = terminal.wait_for(lambda s: starred(s) == ["worker"], "*worker")
    assert worker_names(screen) == sorted(worker_names(screen))

    terminal.keys("q")
    assert exit_code(terminal) == 0
    # curses gave the terminal back: the pane shows the shell's line, not the drawn screen.
    screen = terminal.wait_for(lambda s: any("scaler_top exited with 0" in line for line in s), "the exit line")
    assert not any(line.startswith("Total ") for line in screen)


def test_top_counts_tasks_as_they_finish(combo: SchedulerClusterCombo, run_in_terminal) -> None:
    terminal = run_in_terminal(default_monitor_address(combo.get_address()))
    screen = terminal.wait_for(lambda s: "Total 2 worker(s)" in s, "Total 2 worker(s)")

    def successes(lines: list[str]) -> int:
        for line in lines:
            cells = [cell.strip() for cell in line.split("|")]
            if len(cells) > 1 and cells[1].startswith("success"):
                return int(cells[1].split()[1].replace(",", ""))
        raise AssertionError("no success row on the screen:\n" + "\n".join(lines))

    before = successes(screen)
    with Client(address=combo.get_address(), timeout_seconds=30) as client:
        assert client.map(pow, [(i, 2) for i in range(300)]) == [i * i for i in range(300)]
    terminal.wait_for(lambda s: successes(s) >= before + 300, f"at least {before + 300} successes")
    terminal.keys("q")
    assert exit_code(terminal) == 0


def store_row(screen: list[str]) -> dict[str, str]:
    """The one store's row, by column header (the cluster runs one store)."""
    total = screen.index("Total 1 store(s)")
    headers = screen[total + 1].split()
    return dict(zip(headers, screen[total + 2].split()))


def test_top_shows_the_store_and_what_it_holds(combo: SchedulerClusterCombo, run_in_terminal) -> None:
    terminal = run_in_terminal(default_monitor_address(combo.get_address()))
    screen = terminal.wait_for(lambda s: "Total 1 store(s)" in s, "Total 1 store(s)")
    row = store_row(screen)
    assert row["workers"] == "2", screen  # both workers of the cluster keep their objects in it
    assert any(line.split()[:2] == ["relayed", "0b"] for line in screen), screen  # no relay yet

    object_id = uuid.uuid4().bytes
    with StoreClient(StoreAddress("tcp://" + row["address"]), local=False) as store:
        store.put(object_id, b"x" * (3 << 20))
    screen = terminal.wait_for(lambda s: store_row(s)["objects"] != row["objects"], "the object in the store row")
    held = store_row(screen)["held"]
    assert held.endswith("m") and float(held[:-1]) >= 3.0, screen
    terminal.keys("q")
    assert exit_code(terminal) == 0


def test_top_quits_on_ctrl_c_while_showing_a_live_cluster(combo: SchedulerClusterCombo, run_in_terminal) -> None:
    terminal = run_in_terminal(default_monitor_address(combo.get_address()))
    terminal.wait_for(lambda s: "Total 2 worker(s)" in s, "Total 2 worker(s)")
    terminal.keys("C-c", literal=False)
    assert exit_code(terminal) == 0
    # curses gave the terminal back: no traceback, and the drawn screen is gone.
    screen = terminal.wait_for(lambda s: any("scaler_top exited with 0" in line for line in s), "the exit line")
    assert not any(line.startswith("Total ") or "Traceback" in line or "KeyboardInterrupt" in line for line in screen)


@pytest.fixture
def short_directory() -> Iterator[str]:
    """Where nobody listens, by a path short enough that the line naming it fits the terminal's width (a
    tmp_path is longer under pytest-xdist, and the line was cut)."""
    with tempfile.TemporaryDirectory(prefix="top-") as directory:
        yield directory


def test_top_waits_for_a_missing_scheduler_and_quits_on_ctrl_c(run_in_terminal, short_directory: str) -> None:
    address = f"ipc://{short_directory}/nobody_monitor"
    terminal = run_in_terminal(address)
    terminal.wait_for(lambda s: f"waiting for scheduler at {address} ..." in s, "the waiting line")
    terminal.keys("C-c", literal=False)
    assert exit_code(terminal) == 0
    terminal.wait_for(lambda s: any("scaler_top exited with 0" in line for line in s), "the exit line")


def screen_text(screen: list[str]) -> str:
    """The screen as one line of words: a long problem is wrapped over several rows."""
    return " ".join(" ".join(screen).split())


def test_top_at_the_schedulers_own_address_says_which_monitor_address_to_use(
    combo: SchedulerClusterCombo, run_in_terminal
) -> None:
    address = combo.get_address()
    terminal = run_in_terminal(address)
    expected = (
        f"{address} answers, but not as a scheduler's monitor feed: if it is the scheduler's own address, its "
        f"monitor address is {default_monitor_address(address)}"
    )
    terminal.wait_for(lambda s: expected in screen_text(s), "the hint to use the monitor address")
    terminal.keys("q")
    assert exit_code(terminal) == 0


def test_top_says_when_nothing_answers_and_keeps_trying(run_in_terminal, short_directory: str) -> None:
    address = f"ipc://{short_directory}/nobody_monitor"
    terminal = run_in_terminal(address)
    screen = terminal.wait_for(lambda s: f"nothing answers at {address} yet (still trying)" in screen_text(s),
                               "the line that nothing answers")
    assert f"waiting for scheduler at {address} ..." in screen
    terminal.keys("q")
    assert exit_code(terminal) == 0


def client_rows(screen: list[str]) -> dict[str, dict[str, str]]:
    """The client table as shown: each client's cells by column header; {} before it shows."""
    totals = [index for index, line in enumerate(screen) if line.startswith("Total ") and line.endswith(" client(s)")]
    if not totals or totals[0] + 1 >= len(screen):
        return {}
    headers = screen[totals[0] + 1].split()
    rows = {}
    for line in screen[totals[0] + 2:]:
        if not line.strip() or line.startswith("..."):
            break
        rows[line.split()[0]] = dict(zip(headers, line.split()))
    return rows


def shows_the_backlog(screen: list[str]) -> bool:
    rows = client_rows(screen)
    if {"backlog", "idle"} - set(rows):
        return False
    backlog = rows["backlog"]
    return int(backlog["queued"]) + int(backlog["running"]) == BACKLOG and int(backlog["running"]) > 0


def test_top_shows_each_clients_queued_and_running_tasks_and_the_oldest_wait(run_in_terminal, tmp_path) -> None:
    with TwoClients(tmp_path) as scene:
        terminal = run_in_terminal(scene.monitor_address)
        screen = terminal.wait_for(shows_the_backlog, "the backlog in the client table")
        rows = client_rows(screen)
        assert list(rows) == ["backlog", "idle"]  # the one that waits, first
        assert int(rows["backlog"]["queued"]) > 0 and rows["backlog"]["tasks"] == str(BACKLOG)
        assert (rows["backlog"]["share"], rows["backlog"]["run%"]) == ("1", "100%")
        assert rows["idle"] == {
            "client": "idle", "queued": "0", "running": "0", "oldest_wait": "-", "share": "1", "run%": "0%",
            "tasks": "0", "objects": "0", "obj_size": "0b",
        }
        first_wait = rows["backlog"]["oldest_wait"]
        assert first_wait.endswith("s")
        terminal.wait_for(lambda s: shows_the_backlog(s) and client_rows(s)["backlog"]["oldest_wait"] != first_wait,
                          "the oldest wait growing")

        scene.open_gate()
        terminal.wait_for(lambda s: client_rows(s).get("backlog", {}).get("tasks") == "0", "the backlog done")
        assert client_rows(terminal.screen())["backlog"]["oldest_wait"] == "-"
        terminal.keys("q")
        assert exit_code(terminal) == 0


def shown_lines(screen: list[str]) -> tuple[int, int, int]:
    """(first, last, total) from the last row: `-- lines 12-20 of 31; scroll with ... --`."""
    span, total = screen[-1].removeprefix("-- lines ").split(";")[0].split(" of ")
    first, last = span.split("-")
    return int(first), int(last), int(total)


def test_top_scrolls_what_does_not_fit_the_terminal(combo: SchedulerClusterCombo, run_in_terminal) -> None:
    terminal = run_in_terminal(default_monitor_address(combo.get_address()), height=10)
    screen = terminal.wait_for(lambda s: s[-1].startswith("-- lines 1-9 of "), "the line that says what is shown")
    assert "scheduler" in screen[0] and "Total 2 worker(s)" not in screen

    terminal.keys("End", literal=False)
    screen = terminal.wait_for(lambda s: " of " in s[-1] and not s[-1].startswith("-- lines 1-"), "the end")
    assert len(worker_names(screen)) == 2  # the worker table, whole, near the bottom
    first, last, total = shown_lines(screen)
    assert last == total
    terminal.keys("Up", literal=False)
    terminal.wait_for(lambda s: shown_lines(s)[0] == first - 1, "one line up")
    terminal.keys("Home", literal=False)
    terminal.wait_for(lambda s: s[-1].startswith("-- lines 1-9 of "), "the top again")
    terminal.keys("PageDown", literal=False)
    terminal.wait_for(lambda s: s[-1].startswith("-- lines 9-"), "one page down")
    terminal.keys("q")
    assert exit_code(terminal) == 0


def test_top_given_a_standby_and_the_scheduler_it_stands_by_for_shows_the_serving_ones_feed(
    combo: SchedulerClusterCombo, run_in_terminal, spawn: Spawner, short_directory: str
) -> None:
    """The monitor addresses of both, the standby's first: its feed (no workers, standing by) is passed over."""
    standby_monitor = f"ipc://{short_directory}/standby_monitor"
    start_scheduler(spawn, free_local_address(), "--standby-of", combo.get_address(), "--monitor-address",
                    standby_monitor, name="standby")
    terminal = run_in_terminal(f"{standby_monitor},{default_monitor_address(combo.get_address())}")
    terminal.wait_for(lambda s: "Total 2 worker(s)" in s, "the serving scheduler's two workers")
    for _ in range(10):  # and it stays there, while both publish
        time.sleep(0.2)
        assert "Total 2 worker(s)" in terminal.screen(), "\n".join(terminal.screen())
    terminal.keys("q")
    assert exit_code(terminal) == 0
