"""LocalSlurm: the one-host Slurm of supervisor.py, started for a test module and stopped after it."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time

SUPERVISOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "supervisor.py")
_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
_START_SECONDS = 90.0
_STOP_SECONDS = 90.0


def unavailable_reason() -> str | None:
    """Why no Slurm can be started here, or None. .ci/run installs it (Debian's slurm-wlm and munge)."""
    if not sys.platform.startswith("linux"):
        return "a local Slurm needs Linux"
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "slurmd runs jobs as their users, which needs root"
    return None


class LocalSlurm:
    def __init__(self, directory: str, environment: dict[str, str]) -> None:
        self.directory = directory
        self.environment = dict(environment, SLURM_CONF=os.path.join(directory, "slurm.conf"))
        began = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, SUPERVISOR, directory], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            env=self.environment,
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], _START_SECONDS)
        line = self.process.stdout.readline().strip() if ready else "failed: no answer from the supervisor"
        self.startup_seconds = time.monotonic() - began
        if not line.startswith("ready"):
            self.stop()
            raise RuntimeError(f"the test Slurm did not start: {line}\n{self.logs()}")

    def run(self, *command: str) -> str:
        """A Slurm command against this cluster; its output (CalledProcessError if it fails)."""
        return subprocess.run(
            list(command), capture_output=True, text=True, check=True, timeout=60, env=self.environment
        ).stdout

    def jobs(self, name: str) -> dict[str, str]:
        """Jobs called `name` that have not ended, by id: their state (PENDING, RUNNING, COMPLETING, ...)."""
        output = self.run("squeue", "--noheader", f"--name={name}", "--format=%i %T")
        return dict(line.split() for line in output.splitlines() if line.strip())

    def logs(self) -> str:
        texts = []
        log_directory = os.path.join(self.directory, "log")
        for name in sorted(os.listdir(log_directory)) if os.path.isdir(log_directory) else []:
            with open(os.path.join(log_directory, name), errors="replace") as log:
                texts.append(f"--- {name}\n{log.read()[-3000:]}")
        return "\n".join(texts)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
