"""`scaler_cluster`'s options (`[cluster]` in a config file), and SchedulerClusterCombo's keywords.

The cluster's table is its own options, every worker option (scaler/worker/settings.py) and those of its
store. SchedulerClusterCombo takes every option of the scheduler's table and of this one as a keyword
(`combo_keywords`): by its name, but for the 1.9.x keywords of the combo (COMBO_NAMES), and with a
`scheduler_`/`worker_` prefix where both tables have an option of that name that means a different
thing (`scheduler_io_threads`, `worker_io_threads`).
"""

from __future__ import annotations

import os

from scaler.scheduler.settings import SCHEDULER
from scaler.store.settings import CAPACITY_DEFAULT_TEXT, DATA_ADDRESS
from scaler.utility.ignored_settings import (
    EVENT_LOOP,
    EVENT_LOOPS,
    GARBAGE_COLLECT_INTERVAL_SECONDS,
    HARD_PROCESSOR_SUSPEND,
    TRIM_MEMORY_THRESHOLD_BYTES,
)
from scaler.utility.option_table import OFF_SWITCH, Option, OptionTable, ignored_option
from scaler.utility.setting_rules import BYTES_OR_OFF, POSITIVE_SECONDS, Rule
from scaler.utility.shared_options import address_option, logging_options
from scaler.utility.text_rules import ON_OR_OFF, SCHEDULER_ADDRESSES, NamesRule, one_of
from scaler.worker.settings import WORKER_OPTIONS

# More workers than this on one machine is a typo, not a plan.
MAX_WORKERS = 4096

CLUSTER = OptionTable(
    "cluster",
    (
        Option(
            "num_of_workers", os.cpu_count() or 1, Rule(int, 1, MAX_WORKERS), "number of workers", flags=("-n",),
            default_text="one per core",
        ),
        Option(
            "worker_names", None, NamesRule("a worker name"), "comma-separated worker names, one per worker",
            flags=("-wn",), metavar="NAME,...", default_text="host name and index",
        ),
    ),
    WORKER_OPTIONS,
    (
        ignored_option(GARBAGE_COLLECT_INTERVAL_SECONDS, POSITIVE_SECONDS, "-gc"),
        ignored_option(TRIM_MEMORY_THRESHOLD_BYTES, BYTES_OR_OFF, "-tm"),
        ignored_option(HARD_PROCESSOR_SUSPEND, ON_OR_OFF, "-hps"),
        # The store of this host's objects (PROTOCOL.md §17), started before the workers.
        Option(
            "store_capacity_bytes", None, BYTES_OR_OFF,
            "bytes of objects the store keeps in memory; beyond, the least recently used spill to disk",
            field="capacity_bytes", default_text=CAPACITY_DEFAULT_TEXT, doc="Spilled objects go to unlinked files.",
        ),
        Option(
            "data_address", None, DATA_ADDRESS,
            "where other hosts reach the store: tcp://HOST (a free port) or tcp://HOST:PORT",
            default_text="this host's address on the route to the scheduler",
            doc="Loopback for a scheduler on loopback or ipc.",
        ),
        Option("store", True, ON_OR_OFF, "run the workers without a store", form=OFF_SWITCH),
        Option(
            "borrowing", True, ON_OR_OFF,
            "the store copies every object into its memory, never reading large bytes out of a client's",
            form=OFF_SWITCH,
            doc='See PROTOCOL.md §17, "Borrowed objects"; the store already copies by itself wherever the kernel '
            "forbids the read.",
        ),
        ignored_option(EVENT_LOOP, one_of(EVENT_LOOPS), "-el"),
    ),
    logging_options(),
    (address_option(
        "scheduler address, e.g. tcp://127.0.0.1:2345; with standby schedulers all of them, comma-separated in rank "
        "order, e.g. tcp://a:2345,tcp://b:2345", rule=SCHEDULER_ADDRESSES,
    ),),
)

# The 1.9.x names of SchedulerClusterCombo's keywords for options of the cluster's table.
COMBO_NAMES = {
    "num_of_workers": "n_workers",
    "per_worker_task_queue_size": "per_worker_queue_size",
    "heartbeat_interval": "heartbeat_interval_seconds",
}
# Keywords that set an option of both tables, which mean the same thing in both.
COMBO_SHARED = frozenset(
    {"address", "heartbeat_interval_seconds", "per_worker_queue_size", "event_loop", "logging_paths", "logging_level",
     "logging_config_file"}
)
# Options a combo sets itself.
COMBO_OWN = frozenset({"address"})


def combo_keywords() -> dict[str, list[tuple[OptionTable, Option]]]:
    """Each keyword SchedulerClusterCombo takes, and the options it sets."""
    routes: dict[str, list[tuple[OptionTable, Option]]] = {}
    for table in (SCHEDULER, CLUSTER):
        for option in table:
            keyword = COMBO_NAMES.get(option.name, option.name) if table is CLUSTER else option.name
            routes.setdefault(keyword, []).append((table, option))
    for keyword, targets in list(routes.items()):
        if len(targets) > 1 and keyword not in COMBO_SHARED:
            del routes[keyword]
            for table, option in targets:
                routes[f"{'scheduler' if table is SCHEDULER else 'worker'}_{keyword}"] = [(table, option)]
    return routes


# Cluster(...)'s 1.9.x keywords and the WorkerConfig field each sets: every worker option by its name or its
# field's, and the one 1.9.x keyword named otherwise.
CLUSTER_KEYWORDS = {
    **{option.name: option.config_field for option in (*WORKER_OPTIONS, *logging_options())},
    **{option.config_field: option.config_field for option in (*WORKER_OPTIONS, *logging_options())},
    "worker_io_threads": "io_threads",
}
