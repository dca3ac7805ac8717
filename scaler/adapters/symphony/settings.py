"""`scaler_symphony_cluster`'s options (`[symphony_cluster]` in a config file): the one table of them.

SymphonyWorkerConfig (worker.py) holds the same defaults; tests/unit/test_option_tables.py checks they agree.
"""

from __future__ import annotations

from scaler.utility.ignored_settings import EVENT_LOOP, EVENT_LOOPS
from scaler.utility.option_table import POSITIONAL, Option, OptionTable, ignored_option
from scaler.utility.setting_rules import AT_LEAST_ONE, POSITIVE_SECONDS, TASK_SLOTS
from scaler.utility.shared_options import address_option, logging_options, peer_curve_options
from scaler.utility.text_rules import SCHEDULER_ADDRESSES, TEXT, TextRule, one_of, read_word

# Read from the environment, not the command line, where every user of the machine could see it.
PASSWORD_ENVIRONMENT_VARIABLE = "SCALER_SYMPHONY_PASSWORD"

SYMPHONY_CLUSTER = OptionTable(
    "symphony_cluster",
    (
        Option(
            "base_concurrency", 4, AT_LEAST_ONE,
            "how many unnested tasks run in Symphony at once; nested tasks go beyond it. With nested tasks, keep it "
            "below the cores of the Symphony workers, e.g. cores minus the deepest nesting level, or tasks waiting "
            "on nested ones can take every core and deadlock",
            flags=("-n",),
        ),
        Option(
            "per_worker_task_queue_size", 1000, TASK_SLOTS,
            "how many tasks the worker accepts at once (those beyond what runs wait here, or move to other workers "
            "when the scheduler balances)",
            flags=("-wtqs",), field="task_queue_size",
        ),
        Option(
            "heartbeat_interval", 2.0, POSITIVE_SECONDS, "seconds between heartbeats", flags=("-hi",),
            field="heartbeat_interval_seconds", metavar="SECONDS",
        ),
        Option(
            "death_timeout_seconds", 300.0, POSITIVE_SECONDS, "exit after hearing nothing from the scheduler this long",
            flags=("-ds",),
        ),
        Option(
            "worker_name", "", TEXT, "the worker's name at the scheduler", flags=("-w",), field="name",
            metavar="NAME", default_text="symphony|HOST|PID",
        ),
        *peer_curve_options("this worker's"),
        Option(
            "symphony_user", "Guest", TEXT,
            f"the Symphony user to connect as; the password is read from {PASSWORD_ENVIRONMENT_VARIABLE}",
            metavar="USER",
        ),
        Option(
            "session_type", None, TEXT, "a session type of the application's profile", metavar="TYPE",
            default_text="the application's own",
        ),
        ignored_option(EVENT_LOOP, one_of(EVENT_LOOPS), "-el"),
    ),
    logging_options(),
    (
        address_option(
            "scheduler address, e.g. tcp://127.0.0.1:2345; with standby schedulers all of them, comma-separated in "
            "rank order, e.g. tcp://a:2345,tcp://b:2345", rule=SCHEDULER_ADDRESSES,
        ),
        Option(
            "service", None, TextRule("a Symphony application name", read_word("an application name")),
            "the Symphony application whose service runs the tasks, e.g. ScalerService", form=POSITIONAL,
            required=True,
        ),
    ),
)
