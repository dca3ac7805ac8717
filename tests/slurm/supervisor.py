"""A one-host Slurm for the tests: munged, slurmctld and slurmd in a directory of their own, and their reaper.

    python tests/slurm/supervisor.py DIRECTORY

writes DIRECTORY/slurm.conf and a munge key, starts the three daemons in the foreground as its
children, prints `ready <seconds>` once the node takes jobs (or `failed <why>`), and serves until
SIGTERM or until its parent is gone. Then it cancels every job, stops the daemons and reaps every
process they left. slurmd starts each job's slurmstepd detached, so this process makes itself their
"subreaper" (prctl): orphans of the daemons become its children instead of init's, and nothing a job
started can outlive the fixture unseen.

The settings are those that work in a container without cgroups: processes are tracked by
proctrack/linuxproc (parentage), task/none binds nothing, no accounting or job completion plugin.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time

import psutil

_PR_SET_CHILD_SUBREAPER = 36
READY_TIMEOUT_SECONDS = 60.0
_STOP_JOBS_SECONDS = 30.0
_STOP_DAEMON_SECONDS = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def node_line() -> str:
    """This machine as slurmd sees it (`slurmd -C`): name, CPUs, sockets, cores, memory."""
    printed = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=True).stdout
    line = next(line for line in printed.splitlines() if line.startswith("NodeName="))
    return f"{line} NodeAddr=127.0.0.1 State=UNKNOWN"


def slurm_conf(directory: str, node: str) -> str:
    name = node.split()[0].split("=", 1)[1]
    return "\n".join([
        "ClusterName=scalertest",
        f"SlurmctldHost={name}(127.0.0.1)",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={directory}/munge/munge.socket",
        f"StateSaveLocation={directory}/state",
        f"SlurmdSpoolDir={directory}/spool",
        f"SlurmctldPidFile={directory}/slurmctld.pid",
        f"SlurmdPidFile={directory}/slurmd.pid",
        f"SlurmctldLogFile={directory}/log/slurmctld.log",
        f"SlurmdLogFile={directory}/log/slurmd.log",
        # No cgroups in a container: track a job's processes by parentage, bind nothing, account nothing.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        # Jobs share the node by CPU, so several one-CPU worker jobs run side by side.
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "ReturnToService=2",
        # A cancelled job's processes get SIGTERM, then SIGKILL this many seconds later (default 30).
        "KillWait=5",
        node,
        f"PartitionName=scaler Nodes={name} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


class Supervisor:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.conf = os.path.join(directory, "slurm.conf")
        self.environment = dict(os.environ, SLURM_CONF=self.conf)
        self.daemons: list[subprocess.Popen] = []
        self.stop_requested = False

    def start(self) -> None:
        for sub in ("munge", "state", "spool", "log"):
            os.makedirs(os.path.join(self.directory, sub), exist_ok=True)
        os.chmod(os.path.join(self.directory, "munge"), 0o755)
        key = os.path.join(self.directory, "munge", "munge.key")
        with open(key, "wb") as out:
            out.write(os.urandom(1024))
        os.chmod(key, 0o400)
        with open(self.conf, "w") as out:
            out.write(slurm_conf(self.directory, node_line()))
        munge = os.path.join(self.directory, "munge")
        self.daemon("munged", [
            "munged", "--foreground", "--force", f"--socket={munge}/munge.socket", f"--key-file={key}",
            f"--log-file={munge}/munged.log", f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/munged.seed",
        ])
        self.wait_for(lambda: os.path.exists(f"{munge}/munge.socket"), "munged's socket")
        self.daemon("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        self.daemon("slurmd", ["slurmd", "-D", "-f", self.conf])
        self.wait_for(self.node_is_idle, "the node to be idle in sinfo")

    def daemon(self, name: str, command: list[str]) -> None:
        with open(os.path.join(self.directory, "log", f"{name}.out"), "wb") as out:
            self.daemons.append(subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.environment,
            ))

    def node_is_idle(self) -> bool:
        completed = self.slurm(["sinfo", "--noheader", "--format=%T"])
        return completed is not None and completed.returncode == 0 and "idle" in completed.stdout

    def wait_for(self, condition, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not condition():
            for daemon in self.daemons:
                if daemon.poll() is not None:
                    raise RuntimeError(f"{daemon.args[0]} exited with {daemon.returncode} while waiting for {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {READY_TIMEOUT_SECONDS:g}s")
            self.reap()
            time.sleep(0.1)

    def slurm(self, command: list[str]) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=30, env=self.environment)
        except (OSError, subprocess.TimeoutExpired):
            return None

    def serve(self, parent: int) -> None:
        while not self.stop_requested and os.getppid() == parent:
            self.reap()
            time.sleep(0.2)

    def reap(self) -> None:
        """Collect the exit status of orphans handed to us (daemons are waited for by their Popen)."""
        owned = {daemon.pid for daemon in self.daemons}
        for child in psutil.Process().children():
            if child.pid in owned:
                continue
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)
            except (psutil.Error, ChildProcessError):
                pass

    def stop(self) -> None:
        """Cancel every job and wait for them, stop the daemons, then end and reap whatever is left."""
        listed = self.slurm(["squeue", "--noheader", "--format=%i"])
        job_ids = listed.stdout.split() if listed is not None and listed.returncode == 0 else []
        if job_ids:
            self.slurm(["scancel", *job_ids])
            deadline = time.monotonic() + _STOP_JOBS_SECONDS
            while time.monotonic() < deadline:
                listed = self.slurm(["squeue", "--noheader", "--format=%i"])
                if listed is None or listed.returncode != 0 or not listed.stdout.split():
                    break
                self.reap()
                time.sleep(0.2)
        for daemon in reversed(self.daemons):  # slurmd, slurmctld, then munged
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(_STOP_DAEMON_SECONDS)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
        leftovers = psutil.Process().children(recursive=True)
        for process in leftovers:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(leftovers, timeout=_STOP_DAEMON_SECONDS)
        self.reap()


def main() -> None:
    directory = os.path.abspath(sys.argv[1])
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"failed prctl(PR_SET_CHILD_SUBREAPER): errno {ctypes.get_errno()}", flush=True)
        sys.exit(1)
    supervisor = Supervisor(directory)

    def request_stop(*_: object) -> None:
        supervisor.stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    began = time.monotonic()
    try:
        supervisor.start()
    except Exception as error:
        print(f"failed {error}", flush=True)
        supervisor.stop()
        sys.exit(1)
    print(f"ready {time.monotonic() - began:.2f}", flush=True)
    try:
        supervisor.serve(parent)
    finally:
        supervisor.stop()


if __name__ == "__main__":
    main()
