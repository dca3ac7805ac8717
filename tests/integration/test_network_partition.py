"""A worker host that vanishes, and a network that is cut, across real network boundaries on one machine.

Each worker host lives in a network namespace of its own and reaches the scheduler only over a veth
pair, so "machine gone" and "cable pulled" are what the kernel does, not what a mock pretends:

    root namespace            scheduler namespace S            worker host namespaces
    (pytest, the client)  ==  10.213.X.1 (on lo)           ==  A: 10.213.X.11  (scaler_cluster -n 1)
         10.213.X.254         one veth end per peer        ==  B: 10.213.X.12  (scaler_cluster -n 1)

Every veth end holds a point-to-point address (`ip addr add LOCAL peer REMOTE`), so the route to the
other side belongs to the address and comes back by itself when a link set down is set up again.
Names carry a per-run tag and this process's pid: parallel runs never clash, and a later run removes
what an aborted one left behind. Everything here needs root and a kernel that allows `ip netns add`;
elsewhere the module skips and says why.

The timings are short on purpose: heartbeats every 0.5 s, a worker is dropped after 3 s of silence.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable, Iterator

import psutil
import pytest

from scaler import Client
from scaler.protocol import messages as m
from scaler.protocol.monitor_messages import MonitorSnapshot
from scaler.ui.feed import MonitorSubscriber
from scaler.utility.host_key import this_host_key
from scaler.utility.parent_watch import environment_exiting_with_this_process
from tests.integration.waiting import wait_for_file

HEARTBEAT_SECONDS = 0.5
WORKER_TIMEOUT_SECONDS = 3.0
# Long enough that no cut in these tests ends a worker on its own: the scheduler's verdict decides.
DEATH_TIMEOUT_SECONDS = 60.0
TASK_COUNT = 3000
SCHEDULER_PORT = 23456
# The scheduler checks its timers every 0.25 s and publishes the monitor feed every second; the machine
# running the tests is shared and slow. This is how much later than the timeout a drop may be seen.
DETECTION_SLACK_SECONDS = 4.0

_PREFIX = "scnp"
_NETNS_PATTERN = re.compile(rf"^{_PREFIX}-([0-9a-f]{{5}})-(\d+)-[a-z]+$")
_LINK_PATTERN = re.compile(rf"^{_PREFIX}([0-9a-f]{{5}})[a-z]+$")


def slow_square(x: int) -> int:
    time.sleep(0.002)
    return x * x


# ------------------------------------------------------------------------------------------ ip(8)


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({completed.returncode}): {completed.stderr.strip()}")
    return completed


def _netns_names() -> list[str]:
    listing = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def _pids_in(netns: str) -> list[int]:
    listing = _ip("netns", "pids", netns, check=False).stdout
    return [int(word) for word in listing.split() if word.isdigit()]


def _kill_everything_in(netns: str) -> None:
    for pid in _pids_in(netns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _remove_stale_namespaces() -> None:
    """Namespaces and links of a run whose process is gone (killed, or its teardown never ran)."""
    live_tags = set()
    for name in _netns_names():
        match = _NETNS_PATTERN.match(name)
        if match is None:
            continue
        if psutil.pid_exists(int(match.group(2))):
            live_tags.add(match.group(1))
            continue
        _kill_everything_in(name)
        _ip("netns", "del", name, check=False)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        fields = line.split(":")
        if len(fields) < 2:
            continue
        link = fields[1].strip().split("@")[0]
        match = _LINK_PATTERN.match(link)
        if match is not None and match.group(1) not in live_tags:
            _ip("link", "del", link, check=False)


def _why_network_namespaces_are_unusable() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are a Linux feature"
    if os.geteuid() != 0:
        return "needs root to create network namespaces and veth pairs (CI runs as root)"
    if shutil.which("ip") is None:
        return "needs the ip command (iproute2) to create network namespaces"
    probe = f"{_PREFIX}-{secrets.token_hex(3)[:5]}-{os.getpid()}-probe"
    try:
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"this system forbids `ip netns add` (a container without CAP_SYS_ADMIN?): {made.stderr.strip()}"
        veth = _ip("-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1", check=False)
        if veth.returncode != 0:
            return f"this system cannot create veth pairs: {veth.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


@pytest.fixture(scope="module")
def network_namespaces() -> None:
    reason = _why_network_namespaces_are_unusable()
    if reason is not None:
        pytest.skip(reason)
    _remove_stale_namespaces()


# ------------------------------------------------------------------------------------------ the lab


@dataclasses.dataclass
class Host:
    """One worker machine: a namespace, the veth joining it to the scheduler's, and what runs in it."""

    name: str
    netns: str
    scheduler_side_link: str
    address: str
    log_path: str
    process: subprocess.Popen | None = None

    def log(self) -> str:
        try:
            with open(self.log_path) as log:
                return log.read()
        except FileNotFoundError:
            return ""


class Lab:
    """A scheduler namespace, worker host namespaces, and the processes in them; `close()` removes all."""

    def __init__(self, directory: str, environment: dict[str, str]) -> None:
        self._directory = directory
        self._environment = environment_exiting_with_this_process(environment)
        self._tag = secrets.token_hex(3)[:5]
        self._namespaces: list[str] = []
        self._root_links: list[str] = []
        self._processes: list[subprocess.Popen] = []
        self.hosts: dict[str, Host] = {}
        self.scheduler_netns = ""
        self._subnet = 0
        self.scheduler_ip = self.address = ""
        self.monitor_address = f"ipc://{directory}/monitor"
        self.scheduler_log = os.path.join(directory, "scheduler.log")

    def build(self) -> None:
        """The scheduler's namespace and the client's link to it; every piece is recorded before the next."""
        self.scheduler_netns = self._add_netns("s")
        # The client in the root namespace reaches the scheduler over a veth of its own. Its route is the
        # one thing in the root namespace, so the subnet must be one no other run uses; two runs that pick
        # the same one at the same moment find out here, and the later one picks again.
        client_link = f"{_PREFIX}{self._tag}c"
        self._root_links.append(f"{client_link}h")
        for attempt in range(5):
            self._subnet = self._free_subnet()
            self.scheduler_ip = f"10.213.{self._subnet}.1"
            try:
                self._join(client_link, None, f"10.213.{self._subnet}.254")
            except RuntimeError:
                if attempt == 4:
                    raise
            else:
                # The kernel accepts a second route to the same address without a word: look.
                routes = _ip("-4", "route", "show", f"{self.scheduler_ip}/32").stdout.splitlines()
                if len(routes) == 1 and f"dev {client_link}h " in routes[0] + " ":
                    break
                if attempt == 4:
                    raise RuntimeError(f"no free 10.213.X.0/24 subnet for the client's link: {routes}")
            _ip("link", "del", client_link, netns=self.scheduler_netns, check=False)
        self.address = f"tcp://{self.scheduler_ip}:{SCHEDULER_PORT}"
        _ip("addr", "add", f"{self.scheduler_ip}/32", "dev", "lo", netns=self.scheduler_netns)

    def _add_netns(self, role: str) -> str:
        name = f"{_PREFIX}-{self._tag}-{os.getpid()}-{role}"
        _ip("netns", "add", name)
        self._namespaces.append(name)
        _ip("link", "set", "lo", "up", netns=name)
        return name

    def _free_subnet(self) -> int:
        """A 10.213.X.0/24 the root namespace routes nowhere yet (another run may hold one)."""
        used = set(re.findall(r"10\.213\.(\d+)\.", _ip("-4", "route", "show", "table", "all").stdout))
        candidates = [x for x in range(1, 255) if str(x) not in used]
        return candidates[secrets.randbelow(len(candidates))]

    def _join(self, link: str, netns: str | None, address: str) -> None:
        """A veth pair: `link` stays in the scheduler's namespace, its peer goes to `netns` (None: root)."""
        peer = f"{link}h"
        _ip("link", "add", link, "netns", self.scheduler_netns, "type", "veth", "peer", "name", peer,
            *(["netns", netns] if netns else []))
        _ip("addr", "add", self.scheduler_ip, "peer", f"{address}/32", "dev", link, netns=self.scheduler_netns)
        _ip("link", "set", link, "up", netns=self.scheduler_netns)
        _ip("addr", "add", address, "peer", f"{self.scheduler_ip}/32", "dev", peer, netns=netns)
        _ip("link", "set", peer, "up", netns=netns)

    def add_host(self, name: str) -> Host:
        role = name[-1]
        netns = self._add_netns(role)
        link = f"{_PREFIX}{self._tag}{role}"
        address = f"10.213.{self._subnet}.{11 + len(self.hosts)}"
        self._join(link, netns, address)
        host = Host(name=name, netns=netns, scheduler_side_link=link, address=address,
                    log_path=os.path.join(self._directory, f"{name}.log"))
        self.hosts[name] = host
        return host

    def _spawn(self, netns: str, module: str, *args: str) -> subprocess.Popen:
        process = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-m", module, *args],
            env=self._environment, stdin=subprocess.DEVNULL,
        )
        self._processes.append(process)
        return process

    def start_scheduler(self) -> subprocess.Popen:
        return self._spawn(
            self.scheduler_netns, "scaler.cli.scheduler",
            "--logging-paths", self.scheduler_log,  # nargs="*": not last, or it would take the address
            "--heartbeat-interval-seconds", str(HEARTBEAT_SECONDS),
            "--worker-timeout-seconds", str(WORKER_TIMEOUT_SECONDS),
            "--monitor-address", self.monitor_address,
            self.address,
        )

    def start_worker(self, host: Host, death_timeout_seconds: float = DEATH_TIMEOUT_SECONDS) -> subprocess.Popen:
        host.process = self._spawn(
            host.netns, "scaler.cli.cluster",
            "--logging-paths", host.log_path,
            "--num-of-workers", "1",
            "--worker-names", host.name,
            "--heartbeat-interval", str(HEARTBEAT_SECONDS),
            "--death-timeout-seconds", str(death_timeout_seconds),
            self.address,
        )
        return host.process

    def route_between_hosts(self) -> None:
        """Hosts reach each other through the scheduler's namespace, as machines on one network do: what their
        stores need to fetch from one another. A cut link then cuts a host off from the others too."""
        subprocess.run(["ip", "netns", "exec", self.scheduler_netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
                       check=True, capture_output=True)
        for host in self.hosts.values():
            _ip("route", "add", f"10.213.{self._subnet}.0/24", "via", self.scheduler_ip, netns=host.netns)

    # The events under test.

    def cut(self, host: Host) -> None:
        _ip("link", "set", host.scheduler_side_link, "down", netns=self.scheduler_netns)

    def restore(self, host: Host) -> None:
        _ip("link", "set", host.scheduler_side_link, "up", netns=self.scheduler_netns)

    def destroy(self, host: Host) -> None:
        """The machine is gone: its cable first (so not even a TCP FIN escapes), then its processes, then it."""
        _ip("link", "del", host.scheduler_side_link, netns=self.scheduler_netns)
        _kill_everything_in(host.netns)
        if host.process is not None:
            host.process.wait(timeout=30)
        _ip("netns", "del", host.netns)
        self._namespaces.remove(host.netns)

    def close(self) -> None:
        """Stop every process (politely, then not), then remove every namespace and link. Never raises."""
        workers = [host.process for host in self.hosts.values() if host.process is not None]
        others = [process for process in self._processes if process not in workers]
        for group in (workers, others):  # workers first, so that they can still say goodbye to the scheduler
            for process in group:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            for process in group:
                try:
                    process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    _kill_tree(process.pid)
                    process.wait()
        for netns in self._namespaces:
            _kill_everything_in(netns)
            _ip("netns", "del", netns, check=False)
        for link in self._root_links:
            _ip("link", "del", link, check=False)  # normally gone with its peer's namespace already


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
        processes = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture
def lab(network_namespaces: None, tmp_path, python_env: dict[str, str]) -> Iterator[Lab]:
    the_lab = Lab(str(tmp_path), python_env)
    try:
        the_lab.build()
        yield the_lab
    finally:
        the_lab.close()


# ------------------------------------------------------------------------------------------ watching


class Tally:
    """Counts every result the client receives from the scheduler, per task id: the proof of exactly once."""

    def __init__(self, client: Client) -> None:
        self.successes: dict[int, int] = {}
        self.failures: list[m.TaskFailure] = []
        routing = client._connection._results
        original: Callable[[m.TaskResults], None] = routing.route

        def counting(results: m.TaskResults) -> None:
            for task_id in results.succeeded_ids:
                self.successes[task_id] = self.successes.get(task_id, 0) + 1
            self.failures.extend(results.failures)
            original(results)

        routing.route = counting  # type: ignore[method-assign]

    def delivered(self) -> int:
        return len(self.successes)


def wait_for(
    monitor: MonitorSubscriber, condition: Callable[[MonitorSnapshot], bool], timeout: float, what: str
) -> MonitorSnapshot:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        snapshot = monitor.receive(timeout_seconds=0.5)
        if snapshot is not None:
            last = snapshot
            if condition(snapshot):
                return snapshot
    raise AssertionError(f"not seen within {timeout:g}s: {what}; last snapshot: {last}")


def worker_names(snapshot: MonitorSnapshot) -> set[str]:
    return {worker.name for worker in snapshot.workers}


def assigned_to(snapshot: MonitorSnapshot, name: str) -> int:
    return sum(worker.assigned for worker in snapshot.workers if worker.name == name)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout:g}s: {what}")
        time.sleep(0.05)


@dataclasses.dataclass
class Run:
    lab: Lab
    a: Host
    b: Host
    client: Client
    monitor: MonitorSubscriber
    tally: Tally
    futures: list[concurrent.futures.Future]

    def midway(self) -> None:
        """Thousands of tasks in flight, some done, and host a holding a share of the rest."""
        wait_until(lambda: self.tally.delivered() >= TASK_COUNT // 10, 60, "a tenth of the results")
        wait_for(self.monitor, lambda s: assigned_to(s, "host-a") > 0, 10, "host-a holding tasks")
        assert self.tally.delivered() < TASK_COUNT // 2, "the run finished too soon to cut anything mid-way"

    def check_every_result_exactly_once(self) -> None:
        done, not_done = concurrent.futures.wait(self.futures, timeout=90)
        assert not not_done, f"{len(not_done)} of {TASK_COUNT} futures never finished"
        assert [future.result() for future in self.futures] == [x * x for x in range(TASK_COUNT)]
        assert not self.tally.failures, f"failures reached the client: {self.tally.failures[:3]}"
        repeated = {task_id: count for task_id, count in self.tally.successes.items() if count != 1}
        assert not repeated, f"{len(repeated)} task(s) delivered more than once, e.g. {list(repeated.items())[:3]}"
        assert len(self.tally.successes) == TASK_COUNT
        final = wait_for(self.monitor, lambda s: s.tasks.success >= TASK_COUNT and s.tasks.running == 0, 15,
                         "the scheduler counting every task")
        assert final.tasks.success == TASK_COUNT, "the scheduler completed some task twice"
        assert final.tasks.failed == final.tasks.unassigned == 0


@pytest.fixture
def host_a_death_timeout() -> float:
    return DEATH_TIMEOUT_SECONDS


@pytest.fixture
def run(lab: Lab, host_a_death_timeout: float) -> Iterator[Run]:
    lab.start_scheduler()
    a, b = lab.add_host("host-a"), lab.add_host("host-b")
    lab.start_worker(a, host_a_death_timeout)
    lab.start_worker(b)
    with MonitorSubscriber(lab.monitor_address) as monitor:
        wait_for(monitor, lambda s: worker_names(s) == {"host-a", "host-b"}, 60, "both worker hosts connected")
        with Client(lab.address, timeout_seconds=60, heartbeat_interval_seconds=HEARTBEAT_SECONDS) as client:
            tally = Tally(client)
            futures = [client.submit(slow_square, x) for x in range(TASK_COUNT)]
            yield Run(lab, a, b, client, monitor, tally, futures)


def time_until_dropped(run: Run, name: str, since: float) -> float:
    wait_for(run.monitor, lambda s: name not in worker_names(s),
             WORKER_TIMEOUT_SECONDS + DETECTION_SLACK_SECONDS + 5, f"{name} dropped by the scheduler")
    return time.monotonic() - since


def scheduler_log(lab: Lab) -> str:
    with open(lab.scheduler_log) as log:
        return log.read()


def rescheduled_from(lab: Lab, name: str) -> int:
    # Timed out; or, had the host's end closed the connection on its way out, taken for gone by that.
    match = re.search(
        rf"worker {re.escape(name)} (?:timed out|lost its connection), (\d+) tasks to reschedule", scheduler_log(lab)
    )
    assert match is not None, f"the scheduler never dropped {name}"
    return int(match.group(1))


# ------------------------------------------------------------------------------------------ tests


@pytest.mark.timeout(120)
def test_machine_gone_mid_run_its_tasks_rerun_on_the_other_host_exactly_once(run: Run) -> None:
    run.midway()
    gone_at = time.monotonic()
    run.lab.destroy(run.a)
    noticed_after = time_until_dropped(run, "host-a", gone_at)
    print(f"host-a gone: dropped by the scheduler after {noticed_after:.1f}s")
    assert noticed_after <= WORKER_TIMEOUT_SECONDS + DETECTION_SLACK_SECONDS
    assert rescheduled_from(run.lab, "host-a") > 0, "host-a held no task when it vanished: nothing was proven"
    run.check_every_result_exactly_once()
    assert worker_names(run.monitor.receive(timeout_seconds=2) or MonitorSnapshot()) == {"host-b"}


@pytest.mark.timeout(120)
def test_long_cut_tasks_rerun_elsewhere_late_results_ignored_and_the_cut_off_worker_rejoins(run: Run) -> None:
    run.midway()
    cut_at = time.monotonic()
    run.lab.cut(run.a)
    noticed_after = time_until_dropped(run, "host-a", cut_at)
    print(f"host-a cut off: dropped by the scheduler after {noticed_after:.1f}s")
    assert noticed_after <= WORKER_TIMEOUT_SECONDS + DETECTION_SLACK_SECONDS
    assert rescheduled_from(run.lab, "host-a") > 0, "host-a held no task when cut off: nothing was proven"
    # host-a keeps working through the cut; what it finished reaches the scheduler only once the link is back.
    time.sleep(1.0)
    run.lab.restore(run.a)
    # The scheduler answers the stranger's late heartbeat or results with refused{unknownPeer}: the worker says
    # hello again and re-announces what it holds (PROTOCOL.md §21); its late results are kept aside as orphan
    # results, never delivered a second time.
    wait_until(lambda: "welcomed again" in run.a.log(), 30, "host-a rejoined")
    assert run.a.process is not None and run.a.process.poll() is None, run.a.log()
    run.check_every_result_exactly_once()
    final = run.monitor.receive(timeout_seconds=2) or MonitorSnapshot()
    assert worker_names(final) == {"host-a", "host-b"}
    assert final.sent.get("Refused", 0) >= 1
    assert "scheduler refused us" not in run.a.log()


@pytest.mark.timeout(120)
def test_short_cut_loses_nothing_and_duplicates_nothing(run: Run) -> None:
    run.midway()
    run.lab.cut(run.a)
    time.sleep(1.0)
    run.lab.restore(run.a)
    run.check_every_result_exactly_once()
    assert "host-a timed out" not in scheduler_log(run.lab)
    final = run.monitor.receive(timeout_seconds=2) or MonitorSnapshot()
    assert worker_names(final) == {"host-a", "host-b"}
    assert run.a.process is not None and run.a.process.poll() is None, run.a.log()
    assert "scheduler refused us" not in run.a.log()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("host_a_death_timeout", [6.0])
def test_cut_for_good_the_worker_gives_up_after_its_death_timeout(run: Run, host_a_death_timeout: float) -> None:
    run.midway()
    cut_at = time.monotonic()
    run.lab.cut(run.a)
    time_until_dropped(run, "host-a", cut_at)
    assert run.a.process is not None
    run.a.process.wait(timeout=host_a_death_timeout + 20)
    gave_up_after = time.monotonic() - cut_at
    print(f"host-a cut for good: its cluster exited {gave_up_after:.1f}s after the cut")
    assert run.a.process.returncode == 0, run.a.log()
    assert f"no word from the scheduler for {host_a_death_timeout:g}s, exiting" in run.a.log(), run.a.log()
    assert gave_up_after >= host_a_death_timeout - HEARTBEAT_SECONDS
    wait_until(lambda: not _pids_in(run.a.netns), 10, "no process left on host-a")
    run.check_every_result_exactly_once()


# ------------------------------------------------------------------------------------------ lost data

PART_BYTES = 256 * 1024  # above the inline limit: each part is kept on the host that made it
PARTS = 8


def make_part(index: int, size: int) -> bytes:
    return hashlib.sha256(b"part-%d" % index).digest() * (size // 32)


def make_part_noted(index: int, size: int, directory: str) -> bytes:
    """make_part, leaving behind a file that names the process that made it."""
    with open(os.path.join(directory, f"{index}-{os.getpid()}"), "w"):
        pass
    return make_part(index, size)


def parts_made_on(host: Host, directory: str) -> int:
    """How many of the noted parts a processor of this host made."""
    assert host.process is not None
    count = 0
    for note in os.listdir(directory):
        pid = int(note.split("-")[1])
        if host.process.pid in {parent.pid for parent in psutil.Process(pid).parents()}:
            count += 1
    return count


def digest_of(part: bytes, gate: bool, index: int) -> tuple[int, str]:
    return index, hashlib.sha256(part).hexdigest()


@pytest.mark.timeout(180)
def test_a_host_cut_off_while_holding_intermediates_the_graph_still_completes_exactly_once(
    lab: Lab, tmp_path
) -> None:
    lab.start_scheduler()
    a, b = lab.add_host("host-a"), lab.add_host("host-b")
    lab.route_between_hosts()
    lab.start_worker(a)
    lab.start_worker(b)
    gate = str(tmp_path / "gate")
    with MonitorSubscriber(lab.monitor_address) as monitor:
        wait_for(monitor, lambda s: worker_names(s) == {"host-a", "host-b"} and len(s.stores) == 2, 60,
                 "both hosts and their stores connected")
        with Client(lab.address, timeout_seconds=60, heartbeat_interval_seconds=HEARTBEAT_SECONDS) as client:
            # Each host is a machine of its own: no store shares memory with another host's processes.
            wait_until(lambda: len(client._connection.stores._addresses) == 2, 30, "the client told of both stores")
            host_keys = {address.host_key for address in client._connection.stores._addresses.values()}
            assert len(host_keys) == 2 and this_host_key() not in host_keys, host_keys
            tally = Tally(client)
            notes = str(tmp_path / "notes")
            os.mkdir(notes)
            graph: dict = {"gate": (wait_for_file, gate, 120.0)}
            for index in range(PARTS):
                graph[f"part-{index}"] = (make_part_noted, index, PART_BYTES, notes)
                graph[f"digest-{index}"] = (digest_of, f"part-{index}", "gate", index)
            futures = client.get(graph, [f"digest-{index}" for index in range(PARTS)], block=False)
            # Every part made and held where it was made (by the processor that made it, as nothing else reads
            # it yet: worker/own_results.py); their readers wait for the gate.
            wait_for(monitor, lambda s: s.tasks.success >= PARTS, 60, "the parts made")
            holder = max((a, b), key=lambda host: parts_made_on(host, notes))
            lab.cut(holder)
            with open(gate, "w"):
                pass
            done, not_done = concurrent.futures.wait(list(futures.values()), timeout=120)
            assert not not_done, f"{len(not_done)} of {PARTS} futures never finished"
            results = {key: future.result() for key, future in futures.items()}
            assert results == {
                f"digest-{index}": (index, hashlib.sha256(make_part(index, PART_BYTES)).hexdigest())
                for index in range(PARTS)
            }
            assert not tally.failures, f"failures reached the client: {tally.failures[:3]}"
            repeated = {task_id: count for task_id, count in tally.successes.items() if count != 1}
            assert not repeated, f"delivered more than once: {repeated}"
    assert "Lineage:" in scheduler_log(lab), "no object was lost: the cut proved nothing"
