"""The options of `scaler_top` and `scaler_ui` (`[top]` and `[ui]` in a config file): one table each."""

from __future__ import annotations

import argparse

from scaler.utility.option_table import POSITIONAL, Option, OptionTable
from scaler.utility.setting_rules import Rule
from scaler.utility.shared_options import address_option, logging_options
from scaler.utility.text_rules import TextRule, read_scheduler_addresses

MONITOR_ADDRESS_HELP = (
    "the scheduler's monitor address, printed by the scheduler on startup, e.g. ipc:///tmp/127.0.0.1_2345_monitor; "
    "with standby schedulers the monitor addresses of all of them, comma-separated: the serving one's feed is shown"
)
# One monitor address, or several (a scheduler's and its standbys'), read as scheduler addresses are.
MONITOR_ADDRESSES = TextRule(
    "one or more monitor addresses, comma-separated, e.g. ipc:///tmp/127.0.0.1_2345_monitor", read_scheduler_addresses
)


def read_host(text: str) -> str:
    if not text or text != text.strip() or "/" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a host name or address, e.g. 127.0.0.1 or 0.0.0.0")
    return text


# scaler_top draws on the terminal: it has no log, and its address is its only argument.
TOP = OptionTable("top", (
    Option("address", None, MONITOR_ADDRESSES, MONITOR_ADDRESS_HELP, form=POSITIONAL, required=True),
))

UI = OptionTable(
    "ui",
    (address_option(MONITOR_ADDRESS_HELP, rule=MONITOR_ADDRESSES),),
    (
        Option(
            "host", "127.0.0.1", TextRule("a host name or address", read_host),
            "interface to serve on; the page has no authentication, so widen it (e.g. 0.0.0.0) with care",
        ),
        Option("port", 8081, Rule(int, 0, 65535), "port to serve on (0: any free port)"),
    ),
    logging_options(),
)
