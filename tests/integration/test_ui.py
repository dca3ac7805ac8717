"""scaler_ui in a real headless browser: Debian's chromium driven by selenium through chromedriver.

The page must load, list the two live workers of the test cluster, and show its numbers changing
while a client runs tasks. The run keeps a screenshot; set SCALER_UI_SCREENSHOT=docs/scaler_ui.png to
refresh the one in the docs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from typing import Any, Callable, Iterator

import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.cluster.combo import free_local_address
from scaler.protocol.monitor_messages import ClientStatus, MonitorSnapshot, TaskCounts, WorkerStatus
from scaler.scheduler.config import default_monitor_address
from scaler.store.store_client import StoreAddress, StoreClient
from tests.conftest import console_script
from tests.integration.client_backlog import BACKLOG, TwoClients
from tests.integration.spawned import Spawner, start_scheduler

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401

    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="Debian's chromium and chromium-driver are not installed "
               "(apt-get install -y chromium chromium-driver; .ci/run installs them)",
    ),
    pytest.mark.skipif(not HAVE_SELENIUM, reason="selenium is not installed (pip install -e '.[dev]')"),
]

# What Chromium needs on a machine with no network but the package registries (see the env notes).
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1400,1400",
)


def wait_until(condition: Callable[[], Any], what: str, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def ui_url(combo: SchedulerClusterCombo, python_env: dict[str, str]) -> Iterator[str]:
    with serving_ui(default_monitor_address(combo.get_address()), python_env) as url:
        yield url


@contextlib.contextmanager
def serving_ui(monitor_address: str, python_env: dict[str, str]) -> Iterator[str]:
    """scaler_ui on a free port (--port 0); its URL is read from its first log lines."""
    process = subprocess.Popen(
        [console_script("scaler_ui"), monitor_address, "--port", "0"],
        env=python_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ)
        output = b""
        deadline = time.monotonic() + 30
        match = None
        while match is None:
            assert time.monotonic() < deadline, f"scaler_ui printed no URL: {output.decode(errors='replace')}"
            assert process.poll() is None, f"scaler_ui exited: {output.decode(errors='replace')}"
            if selector.select(timeout=0.5):
                output += os.read(process.stdout.fileno(), 4096)
                match = re.search(rb"serving (http://\S+/)", output)
        selector.close()
        # Keep reading its output so that a chatty server never blocks on a full pipe.
        drain = threading.Thread(target=lambda: process.stdout.read() if process.stdout else None, daemon=True)
        drain.start()
        yield match.group(1).decode()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0, "scaler_ui did not stop cleanly on SIGTERM"
        drain.join(timeout=5)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


@pytest.fixture
def browser(tmp_path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = str(tmp_path / "chromium-profile")
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(30)
        driver.set_script_timeout(30)
        yield driver
    finally:
        driver.quit()
        reap_browser_processes(profile)


def reap_browser_processes(profile: str) -> None:
    """Chromium's helpers can outlive chromedriver as orphans, out of sight of the leak check: end them."""
    import psutil

    def ours() -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["cmdline"]):
            try:
                if any(profile in part for part in process.info["cmdline"] or ()):
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return found

    _, alive = psutil.wait_procs(ours(), timeout=10)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


# The page rebuilds its tables on every update, so an element found a moment ago may be gone: read
# what is shown in one script call instead of holding elements.


def text_of(driver: Any, selector: str) -> str | None:
    return driver.execute_script("const e = document.querySelector(arguments[0]); return e && e.textContent;", selector)


def count(driver: Any, state: str) -> int | None:
    text = text_of(driver, f"#count-{state} .value")
    return int(text.replace(",", "")) if text else None


def worker_rows(driver: Any) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#workers tr[data-worker]')].map(row => row.dataset.worker);"
    )


def test_page_shows_live_workers_and_numbers_that_move(
    combo: SchedulerClusterCombo, ui_url: str, browser: Any, tmp_path
) -> None:
    browser.get(ui_url)
    assert browser.title == "Scaler monitor"
    wait_until(lambda: len(worker_rows(browser)) == 2, "the two workers in the table")
    assert text_of(browser, "#status") == "live"
    assert text_of(browser, "#worker-count") == "2"
    # Tasks held by workers may be queued there, not running: the page says "assigned".
    wait_until(lambda: text_of(browser, "#count-running .label") == "assigned", "the assigned count's label")
    assert text_of(browser, "#stream thead th:nth-child(6)") == "assigned"
    before = wait_until(lambda: count(browser, "success") is not None and (count(browser, "success"),), "counts")[0]

    errors: list[BaseException] = []

    def run_tasks() -> None:
        try:
            with Client(address=combo.get_address(), timeout_seconds=30) as client:
                for _ in range(4):
                    client.map(time.sleep, [(0.02,) for _ in range(100)])
        except BaseException as error:  # reported by the test thread
            errors.append(error)

    worker = threading.Thread(target=run_tasks)
    worker.start()
    try:
        # The numbers change without a reload while tasks run.
        wait_until(lambda: (count(browser, "success") or 0) > before, "the success count to grow")
        wait_until(lambda: browser.execute_script("return model.throughput.some(p => p.finished_per_second > 0)"),
                   "a non-zero point on the throughput chart")
        wait_until(lambda: (text_of(browser, "#stream tbody tr td:nth-child(3)") or "").startswith("+"),
                   "a row in the recent task stream")
    finally:
        worker.join(timeout=60)
    assert not worker.is_alive() and not errors, errors
    wait_until(lambda: count(browser, "success") >= before + 400, "all 400 tasks counted")
    series = browser.execute_script("return Object.keys(model.workers).length")
    assert series == 2, "one CPU/memory series per worker"

    screenshot = tmp_path / "scaler_ui.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    destination = os.environ.get("SCALER_UI_SCREENSHOT")
    if destination:
        shutil.copyfile(screenshot, destination)


def store_rows(driver: Any) -> list[dict[str, str]]:
    """The store table as shown: one dict per row, by column header."""
    return driver.execute_script("""
        const headers = [...document.querySelectorAll('#stores thead th')].map(th => th.textContent);
        return [...document.querySelectorAll('#stores tr[data-store]')].map(row =>
            Object.fromEntries([...row.children].map((td, i) => [headers[i], td.textContent])));
    """)


def test_page_shows_the_store_and_what_it_holds(combo: SchedulerClusterCombo, ui_url: str, browser: Any) -> None:
    browser.get(ui_url)
    rows = wait_until(lambda: store_rows(browser), "the store in its table")
    (row,) = rows
    assert text_of(browser, "#store-count") == "1"
    assert row["workers"] == "2"  # both workers of the cluster keep their objects in it
    scheduler_rows = browser.execute_script(
        "return [...document.querySelectorAll('#scheduler tr')].map(tr => tr.textContent);"
    )
    assert "relayed0b" in scheduler_rows, scheduler_rows

    with StoreClient(StoreAddress("tcp://" + row["address"]), local=False) as store:
        store.put(uuid.uuid4().bytes, b"x" * (3 << 20))
    shown = wait_until(
        lambda: [r for r in store_rows(browser) if r["objects"] != row["objects"]], "the object in the store row"
    )
    assert shown[0]["held"] != row["held"], shown


def test_page_says_it_waits_for_a_missing_scheduler(browser: Any, tmp_path) -> None:
    from scaler.ui.web import WebMonitor

    address = f"ipc://{tmp_path}/nobody_monitor"
    with WebMonitor(address, host="127.0.0.1", port=0) as monitor:
        browser.get(monitor.url)
        wait_until(lambda: text_of(browser, "#status") == f"waiting for scheduler at {address}", "the waiting status")
        assert worker_rows(browser) == []


def client_table(driver: Any) -> list[dict[str, str]]:
    """The client table as shown, in its order: each row by column header."""
    return driver.execute_script("""
        const headers = [...document.querySelectorAll('#clients thead th')].map(th => th.textContent);
        return [...document.querySelectorAll('#clients tr[data-client]')].map(row =>
            Object.fromEntries([...row.children].map((td, i) => [headers[i], td.textContent])));
    """)


def shows_the_backlog(rows: list[dict[str, str]]) -> bool:
    by_name = {row["client"]: row for row in rows}
    if {"backlog", "idle"} - set(by_name):
        return False
    backlog = by_name["backlog"]
    return int(backlog["queued"]) + int(backlog["running"]) == BACKLOG and int(backlog["running"]) > 0


def test_page_shows_each_clients_queued_and_running_tasks_and_the_oldest_wait(
    browser: Any, python_env: dict[str, str], tmp_path
) -> None:
    with TwoClients(tmp_path) as scene, serving_ui(scene.monitor_address, python_env) as url:
        browser.get(url)
        rows = wait_until(lambda: shows_the_backlog(client_table(browser)) and client_table(browser), "the backlog")
        assert [row["client"] for row in rows] == ["backlog", "idle"]  # the one that waits, first
        backlog, idle = rows
        assert int(backlog["queued"]) > 0 and backlog["tasks"] == str(BACKLOG)
        assert (backlog["share"], backlog["of running"]) == ("1", "100%")
        assert idle == {
            "client": "idle", "queued": "0", "running": "0", "oldest wait": "-", "share": "1", "of running": "0%",
            "tasks": "0", "objects": "0", "object size": "0b",
        }
        assert text_of(browser, "#client-count") == "2"
        wait_until(lambda: client_table(browser)[0]["oldest wait"] != backlog["oldest wait"], "the oldest wait growing")

        scene.open_gate()
        done = wait_until(lambda: [row for row in client_table(browser) if row["tasks"] == "0"] == client_table(browser)
                          and client_table(browser), "the backlog done")
        assert [row["oldest wait"] for row in done] == ["-", "-"]


def big_cluster_snapshot(sequence: int) -> MonitorSnapshot:
    """What a scheduler with 500 workers and 50 clients publishes (made here: 500 real workers are too many)."""
    return MonitorSnapshot(
        sequence=sequence, published_at=1_700_000_000.0 + sequence, tasks=TaskCounts(running=4_000, success=sequence),
        clients=[ClientStatus(name=f"client-{index:02d}", tasks=100, queued=20, running=80) for index in range(50)],
        workers=[
            WorkerStatus(name=f"host-{index // 8:02d}|{index:03d}", capacity=8, assigned=8,
                         processor_cpu_percent=float(index % 100), processor_rss_bytes=(40 + index % 7) << 20)
            for index in range(500)
        ],
    )


def test_page_of_a_cluster_of_500_workers_and_50_clients_keeps_working(browser: Any, tmp_path) -> None:
    """Five minutes of 500 workers' history used to reach the page as 18 MB, and drawing its charts then
    overflowed the script's stack at every update: they stopped drawing."""
    from scaler.ui.web import WebMonitor

    with WebMonitor(f"ipc://{tmp_path}/nobody_monitor", host="127.0.0.1", port=0) as monitor:
        for sequence in range(300):  # the history the page starts from: as long as it keeps
            monitor.state.add(big_cluster_snapshot(sequence))
        browser.get(monitor.url)
        wait_until(lambda: len(worker_rows(browser)) == 500 and len(client_table(browser)) == 50, "every row")
        monitor.state.add(big_cluster_snapshot(300))
        wait_until(lambda: count(browser, "success") == 300, "the next update")
        errors = [entry["message"] for entry in browser.get_log("browser") if "favicon" not in entry["message"]]
        assert errors == []
        # The CPU and memory charts: two lines stand for the 500 workers.
        assert browser.execute_script("return Object.keys(model.workers).sort()") == [
            "max of all workers", "mean of all workers"
        ]


def worker_table(driver: Any) -> dict[str, dict[str, str]]:
    """The worker table as shown: each worker's row, by column header."""
    return driver.execute_script("""
        const headers = [...document.querySelectorAll('#workers thead th')].map(th => th.textContent);
        return Object.fromEntries([...document.querySelectorAll('#workers tr[data-worker]')].map(row => [
            row.dataset.worker, Object.fromEntries([...row.children].map((td, i) => [headers[i], td.textContent]))]));
    """)


def test_page_shows_a_drained_worker_as_draining(combo: SchedulerClusterCombo, ui_url: str, browser: Any) -> None:
    # Last in this module: the worker drains until the module's cluster stops.
    browser.get(ui_url)
    shown = wait_until(lambda: len(worker_table(browser)) == 2 and worker_table(browser), "the two workers")
    assert [row["state"] for row in shown.values()] == ["", ""]
    drained, kept = sorted(shown)
    with Client(address=combo.get_address(), timeout_seconds=30) as client:
        assert client.drain_workers([drained]).draining == (drained,)
    wait_until(lambda: worker_table(browser)[drained]["state"] == "draining", "the drained worker shown draining")
    assert worker_table(browser)[kept]["state"] == ""


def test_given_a_standby_and_the_scheduler_it_stands_by_for_the_page_shows_the_serving_ones_feed(
    combo: SchedulerClusterCombo, python_env: dict[str, str], spawn: Spawner, tmp_path, browser: Any
) -> None:
    """The monitor addresses of both, the standby's first: its feed (no workers, standing by) is passed over."""
    standby_monitor = f"ipc://{tmp_path}/standby_monitor"
    start_scheduler(spawn, free_local_address(), "--standby-of", combo.get_address(), "--monitor-address",
                    standby_monitor, name="standby")
    serving = default_monitor_address(combo.get_address())
    with serving_ui(f"{standby_monitor},{serving}", python_env) as url:
        browser.get(url)
        wait_until(lambda: len(worker_rows(browser)) == 2, "the serving scheduler's two workers")
        with urllib.request.urlopen(url + "api/state", timeout=10) as response:
            assert json.loads(response.read())["feed"]["address"] == serving
