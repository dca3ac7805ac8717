"""The first thing a command does once its options are read: start its log, and say in it which options given
have no effect (the 1.9.x options of its table that are accepted and ignored)."""

from __future__ import annotations

import argparse
import logging

from scaler.utility.logging_setup import setup_logging
from scaler.utility.option_table import IGNORED_GIVEN


def start_logging(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """setup_logging, with what can still go wrong (a malformed config file, a disk gone) as a parser error;
    then the first lines: which of the given options have no effect."""
    try:
        setup_logging(args.logging_paths, args.logging_level, args.logging_config_file)
    except Exception as error:  # fileConfig raises KeyError, configparser errors, OSError...
        what = f"--logging-config-file {args.logging_config_file}" if args.logging_config_file else "logging"
        parser.error(f"{what}: cannot set up logging: {type(error).__name__}: {error}")
    announce_ignored_options(parser, args)


def announce_ignored_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Say once, and only to whoever gave it, that an option changes nothing."""
    for flag, (value, why) in getattr(args, IGNORED_GIVEN, {}).items():
        shown = flag if value is True else f"{flag} {value}"
        logging.info(f"{parser.prog}: {shown} is accepted for compatibility with Scaler 1.9.x and has no effect: {why}")
