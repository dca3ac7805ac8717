"""A worker's options, as `scaler_cluster` gives them to each of its workers: the one table of them.

WorkerConfig (config.py) takes its defaults from here; the cluster's table (scaler/cluster/settings.py)
adds its own options to these. Two names are those of Scaler 1.9.x's command line, not the fields':
`--per-worker-task-queue-size` sets `task_queue_size`, `--heartbeat-interval` sets
`heartbeat_interval_seconds`.
"""

from __future__ import annotations

from scaler.utility.option_table import Option, OptionTable
from scaler.utility.setting_rules import (
    AT_LEAST_ONE,
    BYTES_OR_OFF,
    IO_THREADS,
    POSITIVE_SECONDS,
    SECONDS_OR_OFF,
    TASK_SLOTS,
)
from scaler.utility.shared_options import logging_options, peer_curve_options
from scaler.utility.text_rules import TAGS

# The processors' wait for a stored input before its holder counts as gone (scaler/worker/task_objects.py).
DEFAULT_INPUT_WAIT_SECONDS = 10.0

WORKER_OPTIONS: tuple[Option, ...] = (
    Option(
        "tags", (), TAGS,
        "comma-separated capabilities of these workers, e.g. gpu,fast: tasks submitted with tags={'gpu'} run only on "
        "workers that have every tag they require (the workers always have 'python' too)",
        metavar="TAG,...", doc='See the README, "Capability routing".',
    ),
    Option(
        "per_worker_task_queue_size", 1000, TASK_SLOTS,
        "how many tasks each worker accepts at once (shown as 'free' in scaler_top)",
        flags=("-wtqs",), field="task_queue_size",
    ),
    Option(
        "max_processors", 64, AT_LEAST_ONE,
        "processes one worker may run: one serves while the others hold tasks waiting on nested tasks; a task that "
        "would need more fails with NestingLimitError instead of deadlocking",
        flags=("-mp",), doc="See docs/nested_tasks.md.",
    ),
    Option(
        "heartbeat_interval", 2.0, POSITIVE_SECONDS, "seconds between heartbeats to the scheduler",
        flags=("-hi",), field="heartbeat_interval_seconds", metavar="SECONDS",
    ),
    Option(
        "task_timeout_seconds", 0.0, SECONDS_OR_OFF,
        "a task running longer is stopped, its processor replaced, and it fails with TaskTimeoutError (0 = no limit)",
        flags=("-tts",),
    ),
    Option(
        "memory_limit_bytes", 0, BYTES_OR_OFF,
        "a processor using more memory (RSS) is stopped before the OS kills it, and its task fails with "
        "MemoryLimitError (0 = no limit)",
        flags=("-ml",),
    ),
    Option(
        "input_wait_seconds", DEFAULT_INPUT_WAIT_SECONDS, POSITIVE_SECONDS,
        "how long a task waits for a stored input (plus its size at 20 MB/s) before the worker reports it lost and "
        "gives the task back",
    ),
    Option(
        "death_timeout_seconds", 300.0, POSITIVE_SECONDS,
        "a worker that hears nothing from the scheduler this long exits: with an error if it never got a welcome",
        flags=("-ds",),
        doc="It logs an ERROR and exits with status 1 if it never got a welcome, a WARNING and status 0 if its "
        "scheduler went silent later.",
    ),
    Option("io_threads", 1, IO_THREADS, "zmq io threads per worker", flags=("-it",)),
    *peer_curve_options("this cluster's", doc="The cluster's store uses the same keys."),
)

# What WorkerConfig's fields take their defaults from (its logging level aside: see config.py).
WORKER = OptionTable("worker", WORKER_OPTIONS, logging_options())
