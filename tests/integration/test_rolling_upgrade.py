"""A rolling upgrade (issue 26 point 5; PROTOCOL.md "Versions and rolling upgrades", docs/failure_model.md):
the scheduler of a running cluster is killed and one of a newer release, of the same protocol version, takes
over: the same worker processes, every task's right result. One of another protocol version refuses the
workers and the clients, and everyone's words name both sides' releases and protocol versions.

How a test gets a scheduler of another release: the release and protocol version a scheduler speaks are a
parameter of its entry point (`scaler.cli.scheduler.main(argv, speaks=...)`, which CoreConfig carries to the
core), set by a program and never by an option or the environment, since an operator has no reason to
misstate them. So the "newer" scheduler is the installed one started with another `speaks`: everything it does
is the installed code's, and only what it says of itself differs, which is all the peers see of a release.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from scaler import Client
from scaler.cluster.combo import free_local_address
from scaler.errors import ConnectionFailedError
from scaler.protocol import messages as m
from tests.conftest import console_script
from tests.integration.spawned import Spawned, Spawner
from tests.integration.test_scheduler_restart_clients import slow_add, start_workers, worker_agents
from tests.integration.waiting import wait_until
from tests.native_worker import native_worker_executable

pytestmark = pytest.mark.timeout(180)

WAIT_SECONDS = 60.0  # an upper bound against hangs on a loaded machine, never an expectation
SCHEDULER_OPTIONS = ("--heartbeat-interval-seconds", "0.5", "--worker-timeout-seconds", "5", "--logging-level", "INFO")
NEWER_RELEASE = "scaler 99.1.0"

# `python -c SCHEDULER_OF_RELEASE RELEASE PROTOCOL_VERSION [scaler_scheduler arguments]`
SCHEDULER_OF_RELEASE = textwrap.dedent("""
    import sys
    from scaler.cli.scheduler import main
    from scaler.protocol.versions import Speaks

    release, protocol_version, *arguments = sys.argv[1:]
    main(arguments, speaks=Speaks(release, int(protocol_version)))
""")


def start_scheduler_of_release(
    spawn: Spawner, address: str, release: str, protocol_version: int, name: str
) -> Spawned:
    scheduler = spawn(name, [
        sys.executable, "-c", SCHEDULER_OF_RELEASE, release, str(protocol_version), *SCHEDULER_OPTIONS, address,
    ])
    scheduler.wait_for_log(f"listening on {address} ({release}, protocol version {protocol_version})")
    return scheduler


def test_a_newer_release_of_the_same_protocol_takes_over_a_running_cluster(spawn: Spawner) -> None:
    address = free_local_address()
    old = spawn("scheduler", [console_script("scaler_scheduler"), *SCHEDULER_OPTIONS, address])
    old.wait_for_log(f"listening on {address} ({m.RELEASE}, protocol version {m.PROTOCOL_VERSION})")
    workers = start_workers(spawn, address, "workers")
    agents = worker_agents(workers)
    assert len(agents) == 2
    with Client(address=address, timeout_seconds=60) as client:
        futures = [client.submit(slow_add, value, 1000) for value in range(12)]
        wait_until(lambda: any(future.done() for future in futures), "the first results came", timeout=WAIT_SECONDS)
        assert not all(future.done() for future in futures), "nothing was in flight when the scheduler died"
        old.process.send_signal(signal.SIGKILL)
        old.wait_exit()
        time.sleep(1.0)  # the operator starts the new release's scheduler, with the same command, a little later
        newer = start_scheduler_of_release(spawn, address, NEWER_RELEASE, m.PROTOCOL_VERSION, "scheduler-newer")
        assert [future.result(timeout=WAIT_SECONDS) for future in futures] == [value + 1000 for value in range(12)]
        assert client.submit(slow_add, 2, 3).result(timeout=WAIT_SECONDS) == 5
    assert worker_agents(workers) == agents, "the same worker processes, none replaced"
    welcomed_again = re.findall(r"(Worker\[.*?\]|Store): welcomed again;.*\(scheduler: (.*?)\)", workers.log())
    newer_release = f"{NEWER_RELEASE}, protocol version {m.PROTOCOL_VERSION}"
    assert sorted(who[:6] for who, release in welcomed_again if release == newer_release) == [
        "Store", "Worker", "Worker"
    ], workers.log()
    # The new scheduler's log shows the cluster in the middle of the upgrade: peers of the release before.
    assert newer.log().count(f"({m.RELEASE})") >= 3, newer.log()  # both workers and the client
    assert "refused us" not in workers.log()


OURS = f"{m.RELEASE}, protocol version {m.PROTOCOL_VERSION}"
THEIRS = f"scaler 100.0.0, protocol version {m.PROTOCOL_VERSION + 1}"


def start_scheduler_of_another_protocol(spawn: Spawner) -> tuple[str, Spawned]:
    address = free_local_address()
    return address, start_scheduler_of_release(
        spawn, address, "scaler 100.0.0", m.PROTOCOL_VERSION + 1, "scheduler-other"
    )


def test_a_scheduler_of_another_protocol_version_refuses_workers_and_clients_naming_both_versions(
    spawn: Spawner,
) -> None:
    address, other = start_scheduler_of_another_protocol(spawn)
    ours, theirs = OURS, THEIRS
    worker = spawn("worker", [
        console_script("scaler_cluster"), "-n", "1", "--death-timeout-seconds", "60", "--logging-level", "INFO",
        address,
    ])
    assert worker.wait_exit() == 1
    refusal = f"scheduler refused us (worker of {ours}; scheduler at {address}): protocol version"
    assert refusal in worker.log() and theirs in worker.log(), worker.log()

    with pytest.raises(ConnectionFailedError) as refused:
        Client(address=address, timeout_seconds=WAIT_SECONDS)
    assert f"(client of {ours}; scheduler at {address})" in str(refused.value) and theirs in str(refused.value)

    for role in ("worker", "client"):
        assert re.search(rf"refused {role} .*the peer is {re.escape(ours)}, the scheduler is {theirs}", other.log())


def test_the_native_worker_refused_for_its_protocol_version_names_both_and_fails(spawn: Spawner) -> None:
    executable = native_worker_executable()
    address, other = start_scheduler_of_another_protocol(spawn)
    worker = spawn("native-worker", [executable, "--death-timeout-seconds", "60", address])
    assert worker.wait_exit() == 1
    assert f"scheduler refused us (worker of {OURS}; scheduler at {address}): protocol version" in worker.log()
    assert THEIRS in worker.log(), worker.log()
    assert re.search(rf"refused worker .*the peer is {re.escape(OURS)}, the scheduler is {THEIRS}", other.log())


# Every console script with a `--version`: the ones built on scaler.cli.common.make_parser.
VERSIONED_SCRIPTS = ["scaler_scheduler", "scaler_cluster", "scaler_worker", "scaler_slurm_cluster",
                     "scaler_symphony_cluster", "scaler_ui"]


@pytest.mark.parametrize("script", VERSIONED_SCRIPTS)
def test_the_command_says_which_release_protocol_version_and_revision_it_is(
    script: str, python_env: dict[str, str]
) -> None:
    """What an operator compares before an upgrade: the same protocol version, and the scheduler takes over; the
    revision says which additions to that version both sides use."""
    done = subprocess.run([console_script(script), "--version"], capture_output=True, text=True, timeout=60,
                          env=python_env)
    assert (done.returncode, done.stdout) == (0, f"{OURS}, revision {m.PROTOCOL_REVISION}\n"), done.stderr


def test_the_native_worker_says_which_release_protocol_version_and_revision_it_is() -> None:
    done = subprocess.run([native_worker_executable(), "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"{OURS}, revision {m.PROTOCOL_REVISION}\n"), done.stderr
