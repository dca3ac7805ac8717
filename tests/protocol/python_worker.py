"""The Python worker under the suite's command-line contract (README.md): `python -m tests.protocol.python_worker
ADDRESS [options]` becomes, in the same process, the worker agent a Cluster starts (`python -m scaler.worker.agent
<json config>`), so the suite talks to exactly that program."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from scaler.worker.config import WorkerConfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("--worker-name", default="")
    parser.add_argument("--per-worker-task-queue-size", type=int, default=1000)
    parser.add_argument("--heartbeat-interval", type=float, default=2.0)
    parser.add_argument("--death-timeout-seconds", type=float, default=300.0)
    parser.add_argument("--logging-level", default="INFO")
    parser.add_argument("--tags", default="")
    arguments = parser.parse_args()
    config = WorkerConfig(
        address=arguments.address,
        name=arguments.worker_name,
        task_queue_size=arguments.per_worker_task_queue_size,
        heartbeat_interval_seconds=arguments.heartbeat_interval,
        death_timeout_seconds=arguments.death_timeout_seconds,
        logging_level=arguments.logging_level,
        logging_paths=("/dev/stdout",),
        tags=tuple(arguments.tags.split(",")) if arguments.tags else (),
    )
    command = [sys.executable, "-m", "scaler.worker.agent", json.dumps(dataclasses.asdict(config))]
    # As a Cluster starts it: the agent exits with the process that started us (the test session).
    environment = dict(os.environ, SCALER_EXIT_WITH_PARENT=str(os.getppid()))
    os.execve(sys.executable, command, environment)


if __name__ == "__main__":
    main()
