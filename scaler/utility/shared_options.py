"""Options that several commands' tables share: the address, the logging options, the CURVE keys."""

from __future__ import annotations

from scaler.utility.curve import AUTHORIZED_KEYS_ENV, SCHEDULER_SECRET_KEY_ENV, SECRET_KEY_ENV, SERVER_KEY_ENV
from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS, LOGGING_LEVELS
from scaler.utility.option_table import LIST, POSITIONAL, Option
from scaler.utility.text_rules import (
    ADDRESS,
    CURVE_PUBLIC_KEY,
    CURVE_SECRET_KEY,
    EXISTING_DIRECTORY,
    EXISTING_FILE,
    LOGGING_PATHS,
    TextRule,
    one_of,
)


def address_option(help_text: str, doc: str = "", rule: TextRule = ADDRESS) -> Option:
    """The address a command serves or joins (SCHEDULER_ADDRESSES: a scheduler and its standbys). Optional to
    argparse only so that `--logging-paths x.log ADDRESS` can be read (scaler/cli/common.py,
    parse_command_line), which then requires it."""
    return Option("address", None, rule, help_text, form=POSITIONAL, doc=doc)


def logging_options(before_an_address: bool = True) -> tuple[Option, ...]:
    """`before_an_address`: the command takes an address after its options (see address_option)."""
    return (
        Option(
            "logging_paths", DEFAULT_LOGGING_PATHS, LOGGING_PATHS,
            "where to write the log, one or more paths; /dev/stdout and /dev/stderr are the terminal"
            + (
                ". Given before the address, the last value is taken as the address if it is one (or end the list "
                "with --)" if before_an_address else ""
            ),
            flags=("-lp",), form=LIST, metavar="PATH",
        ),
        Option("logging_level", "INFO", one_of(LOGGING_LEVELS, upper=True), "logging level", flags=("-ll",)),
        Option(
            "logging_config_file", None, EXISTING_FILE,
            "a Python logging .conf file (logging.config.fileConfig format); overrides the two options above",
            flags=("-lc",), metavar="FILE",
        ),
    )


def scheduler_curve_options() -> tuple[Option, ...]:
    return (
        Option(
            "curve_secret_key", None, CURVE_SECRET_KEY,
            f"CURVE: this scheduler's .key_secret file (see scaler_keygen); or {SCHEDULER_SECRET_KEY_ENV}",
            metavar="FILE",
        ),
        Option(
            "curve_authorized_keys", None, EXISTING_DIRECTORY,
            f"CURVE: directory of the public .key files of clients and workers to accept; or {AUTHORIZED_KEYS_ENV}",
            metavar="DIRECTORY",
        ),
    )


def peer_curve_options(who: str, doc: str = "") -> tuple[Option, ...]:
    """The keys of a peer of the scheduler (`who`: "this cluster's", "this worker's"); a client takes the
    same two as Client(...) keywords."""
    return (
        Option(
            "curve_server_key", None, CURVE_PUBLIC_KEY, f"CURVE: the scheduler's public .key file; or {SERVER_KEY_ENV}",
            metavar="FILE",
        ),
        Option(
            "curve_secret_key", None, CURVE_SECRET_KEY,
            f"CURVE: {who} .key_secret file (its public key must be authorized by the scheduler); or {SECRET_KEY_ENV}",
            metavar="FILE", doc=doc,
        ),
    )
