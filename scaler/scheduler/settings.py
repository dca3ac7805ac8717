"""The scheduler's options (`scaler_scheduler`, `[scheduler]` in a config file): the one table of them.

SchedulerConfig (config.py) and the core's CoreConfig (core/core_config.py) take their defaults from
here, the command line is built from it (scaler/cli/scheduler.py), and so are SchedulerClusterCombo's
keywords (scaler/cluster/settings.py). The option names are those of released Scaler 1.9.x.
"""

from __future__ import annotations

from scaler.utility.bad_frame_log import INTERVAL_SECONDS as BAD_FRAME_LOG_SECONDS
from scaler.utility.ignored_settings import EVENT_LOOP, EVENT_LOOPS, OBJECT_RETENTION_SECONDS
from scaler.utility.option_table import SWITCH, Option, OptionTable, ignored_option
from scaler.utility.setting_rules import (
    AT_LEAST_ONE,
    FRAME_BYTES,
    FRAME_BYTES_OR_UNLIMITED,
    IO_THREADS,
    POSITIVE_SECONDS,
    SECONDS_OR_OFF,
    TASK_SLOTS_OR_ANY,
    TASKS_WAITING,
    Rule,
)
from scaler.utility.shared_options import address_option, logging_options, scheduler_curve_options
from scaler.utility.text_rules import ADDRESS, ON_OR_OFF, SCHEDULER_ADDRESSES, one_of

SCHEDULER = OptionTable(
    "scheduler",
    (
        Option("io_threads", 1, IO_THREADS, "number of zmq io threads", flags=("-it",)),
        Option(
            "max_number_of_tasks_waiting", -1, TASKS_WAITING,
            "tasks allowed to wait for a worker; beyond it new tasks are rejected; -1 means no limit", flags=("-mt",),
            doc="A rejected task fails with `TaskRejectedError`.",
        ),
        Option(
            "client_timeout_seconds", 60.0, POSITIVE_SECONDS,
            "drop a client (cancel its tasks, free its objects) after this long without hearing from it",
            flags=("-ct",),
        ),
        Option(
            "worker_timeout_seconds", 60.0, POSITIVE_SECONDS,
            "drop a worker and reschedule its tasks after this long without a heartbeat", flags=("-wt",),
            doc="Its tasks go back to the front of the queue.",
        ),
        Option(
            "heartbeat_interval_seconds", 2.0, POSITIVE_SECONDS, "heartbeat interval the scheduler asks its peers for",
            flags=("-hi",),
        ),
        Option(
            "load_balance_seconds", 1.0, SECONDS_OR_OFF,
            "how often to look for workers running dry while others hold queued tasks (0 turns balancing off)",
            flags=("-ls",),
        ),
        Option(
            "load_balance_trigger_times", 2, AT_LEAST_ONE,
            "how many looks in a row must see the imbalance before queued tasks are moved", flags=("-lbt",),
        ),
        Option(
            "per_worker_queue_size", 1000, TASK_SLOTS_OR_ANY,
            "most tasks a worker is given at once (caps what the worker offers); 0 trusts the worker", flags=("-qs",),
        ),
        Option(
            "worker_queue_seconds", 0.05, SECONDS_OR_OFF,
            "queued work each worker is given beyond its running tasks, in seconds at the pace its tasks run "
            "(within --per-worker-queue-size); 0 gives every worker --per-worker-queue-size tasks",
            flags=("-wq",),
            doc="Tiny tasks still get the whole queue size and slow ones a short queue, so that another client's "
            "task never waits behind a deep queue on a worker (scaler/scheduler/core/prefetch.py, docs/sharing.md). "
            "The pace is the tasks' running time as the worker reports it; a worker that does not report it gets "
            "the whole queue size.",
        ),
        Option(
            "max_task_crashes", 3, AT_LEAST_ONE,
            "a task whose processor or worker died under it this many times fails with WorkerDiedError "
            "instead of being retried",
            doc="A worker's death counts for the tasks known to run there (docs/failure_model.md).",
        ),
        Option(
            "max_message_size_bytes", 4 * 1024**3, FRAME_BYTES_OR_UNLIMITED,
            "a peer sending a larger frame is disconnected before it is read (-1: no limit)",
            doc="It is disconnected inside zmq, before the scheduler allocates the frame. Announced to peers: clients "
            "raise `PayloadTooLargeError` for arguments, objects and functions of that size or more, and such a result "
            "fails its task.",
        ),
        Option(
            "max_control_frame_bytes", 256 * 1024**2, FRAME_BYTES,
            "largest Cap'n Proto frame accepted (large payloads travel in frames of their own)",
            doc="Announced to peers, which split their messages to stay under it.",
        ),
        Option(
            "bad_frame_log_seconds", BAD_FRAME_LOG_SECONDS, POSITIVE_SECONDS,
            "after a peer's first undecodable frame is logged, its next ones are counted for this long, then one line "
            "says how many",
        ),
        ignored_option(OBJECT_RETENTION_SECONDS, POSITIVE_SECONDS, "-ot"),
        ignored_option(EVENT_LOOP, one_of(EVENT_LOOPS), "-e"),
        Option(
            "protected", True, ON_OR_OFF, "refuse shutdown requests from clients (--no-protected allows them)",
            flags=("-p",), form=SWITCH,
        ),
        Option(
            "monitor_address", None, ADDRESS, "where the monitor feed is published (see docs/monitor.md)",
            flags=("-ma",), default_text="derived from the address, e.g. ipc:///tmp/127.0.0.1_2345_monitor",
        ),
        Option(
            "monitor_interval_seconds", 1.0, POSITIVE_SECONDS,
            "how often the monitor feed and /metrics get a new snapshot (at most every 0.25 s, the scheduler's tick)",
        ),
        Option(
            "metrics_port", 0, Rule(int, 0, 65535),
            "serve Prometheus metrics at http://HOST:PORT/metrics, HOST being the host of the scheduler's address "
            "(127.0.0.1 for ipc); 0 (the default) serves none",
            doc="Needs prometheus_client (`pip install 'scaler[metrics]'`); docs/metrics.md lists the metrics.",
        ),
        Option(
            "standby_of", None, SCHEDULER_ADDRESSES,
            "run as a standby of the schedulers at these addresses (comma-separated, in rank order): serve only "
            "while none of them serves", flags=("-so",),
            doc="See docs/failure_model.md (standby schedulers): peers list every scheduler, e.g. "
            "`scaler_cluster tcp://a:2345,tcp://b:2345`, and go to the one that serves.",
        ),
        Option(
            "standby_takeover_seconds", 10.0, POSITIVE_SECONDS,
            "with --standby-of: serve once no scheduler ranked before this one was heard serving for this long",
        ),
    ),
    scheduler_curve_options(),
    logging_options(),
    (
        address_option(
            "address to listen on, e.g. tcp://127.0.0.1:2345",
            doc="Beyond loopback without CURVE keys, the log warns.",
        ),
    ),
)
