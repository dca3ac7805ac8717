"""The store's options (`python -m scaler.cli.store`, `[store]` in a config file): the one table of them.

StoreServerConfig (server_config.py) takes its defaults from here. `scaler_cluster` starts its store with
the options of its own table (scaler/cluster/settings.py), which uses DATA_ADDRESS from here.
"""

from __future__ import annotations

import argparse

from scaler.utility.option_table import OFF_SWITCH, Option, OptionTable
from scaler.utility.setting_rules import BYTES_OR_OFF, POSITIVE_SECONDS, SECONDS_OR_OFF
from scaler.utility.shared_options import logging_options, peer_curve_options
from scaler.utility.text_rules import EXISTING_DIRECTORY, ON_OR_OFF, SCHEDULER_ADDRESSES, TEXT, TextRule
from scaler.utility.zmq_config import parse_zmq_address

# Of this machine's memory, what a store keeps in memory by default before it spills to disk.
CAPACITY_DEFAULT_TEXT = "30% of this machine's memory"


def tcp_bind_address(data_address: str) -> str:
    """What to bind for a data address: tcp://HOST means a free port. ValueError for anything else."""
    rest = data_address[len("tcp://"):] if data_address.startswith("tcp://") else None
    if rest is not None and (":" not in rest or rest.endswith("]")):  # no port
        if not rest:
            raise ValueError("a data address needs a host, e.g. tcp://192.168.1.10")
        host = parse_zmq_address(f"{data_address}:1").host
        bind = f"{data_address}:*"
    else:
        parsed = parse_zmq_address(data_address)
        if parsed.type.value != "tcp":
            raise ValueError(f"{data_address!r}: a data address is tcp://HOST or tcp://HOST:PORT")
        bind = parsed.to_address()
        host = parsed.host
    if host in ("*", "0.0.0.0", "[::]"):
        raise ValueError(f"{data_address!r}: give the address other hosts reach this store at, not a wildcard")
    return bind


def read_data_address(text: str) -> str:
    """Where a store binds its data port: tcp://HOST (a free port) or tcp://HOST:PORT, not a wildcard."""
    try:
        tcp_bind_address(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def read_host_key(text: str) -> str:
    if not text or any(character.isspace() for character in text):
        raise argparse.ArgumentTypeError(f"{text!r}: a host key is one word, e.g. BOOT_ID/NETNS_INODE")
    return text


DATA_ADDRESS = TextRule("tcp://HOST or tcp://HOST:PORT, not a wildcard", read_data_address)
HOST_KEY = TextRule("one word, e.g. BOOT_ID/NETNS_INODE", read_host_key)

STORE = OptionTable(
    "store",
    (
        Option(
            "data_address", "tcp://127.0.0.1", DATA_ADDRESS,
            "where other hosts reach this store: tcp://HOST (a free port) or tcp://HOST:PORT",
        ),
        Option(
            "capacity_bytes", None, BYTES_OR_OFF,
            "bytes of objects held in memory; beyond, the least recently used go to disk",
            default_text=CAPACITY_DEFAULT_TEXT,
        ),
        Option(
            "spill_directory", None, EXISTING_DIRECTORY,
            "where objects beyond the capacity go (unlinked files)", default_text="the system's temporary directory",
            metavar="DIRECTORY",
        ),
        Option(
            "host_key", None, HOST_KEY, "which processes share memory with this store",
            default_text="this host's boot id and network namespace",
        ),
        Option("pool_idle_seconds", 30.0, SECONDS_OR_OFF, "free a recycled segment unused for this long"),
        Option(
            "borrowing", True, ON_OR_OFF,
            "copy every local writer's object into shared memory, never read it from the writer's own memory "
            "(process_vm_readv); a store that cannot read a writer's memory falls back to copying by itself",
            form=OFF_SWITCH,
        ),
        Option(
            "scheduler_address", None, SCHEDULER_ADDRESSES,
            "the scheduler to register with (tcp://HOST:PORT); with standbys all of them, comma-separated",
            default_text="none, a standalone store",
        ),
        Option("name", "", TEXT, "shown in the scheduler's log and monitor"),
        Option("heartbeat_interval_seconds", 2.0, POSITIVE_SECONDS, "how often to heartbeat"),
        Option(
            "death_timeout_seconds", 300.0, POSITIVE_SECONDS,
            "stop after hearing nothing from the scheduler for this long",
        ),
        *peer_curve_options("this store's"),
    ),
    logging_options(before_an_address=False),
)
