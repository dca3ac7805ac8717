"""Pieces shared by the console scripts: the parser every one of them builds from its option table, and what
they do with it before they start.

Every value is checked by the parser, so that a bad one ends in argparse's short message and exit
status 2, before anything starts: never a traceback, never a value that fails later on the wire.
"""

from __future__ import annotations

import argparse
from typing import Callable, Sequence

from scaler.protocol.versions import INSTALLED
from scaler.utility.command_logging import announce_ignored_options, start_logging
from scaler.utility.command_parser import FILE_VALUES, parser_for
from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS, logging_path_problem
from scaler.utility.option_table import POSITIONAL, OptionTable
from scaler.utility.text_rules import read_address

__all__ = ["announce_ignored_options", "check_curve_keys", "make_parser", "parse_command_line", "start_logging"]


def make_parser(prog: str, description: str, table: OptionTable) -> argparse.ArgumentParser:
    """A parser with every option of `table`. The usage line is written out: the address is optional to argparse
    only so that `--logging-paths x.log ADDRESS` can be read (see parse_command_line)."""
    positionals = " ".join(option.name for option in table if option.form == POSITIONAL)
    parser = parser_for(table, prog, description, usage=f"{prog} [options] {positionals}")
    # Before an upgrade, the operator compares the protocol versions of the two releases (PROTOCOL.md §22).
    parser.add_argument("--version", action="version", version=INSTALLED.in_full(),
                        help="print the release and the protocol version and revision it speaks, and exit")
    return parser


def parse_command_line(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """parse_args (with the `--config` file's values as defaults), then the checks that need several values: the
    address (which `--logging-paths a.log ADDRESS` hands to the paths, as a list option before a positional does
    in argparse) and the paths."""
    args = parser.parse_args(argv)
    if not hasattr(args, "logging_paths"):
        if args.address is None:
            parser.error("the following arguments are required: address")
        return args
    paths = list(args.logging_paths)
    from_file = getattr(args, FILE_VALUES, {})
    # An address the config file gives may still be given after --logging-paths on the command line.
    address_open = args.address is None or args.address == from_file.get("address", None)
    paths_given = tuple(paths) not in (DEFAULT_LOGGING_PATHS, from_file.get("logging_paths"))
    if address_open and paths and paths_given and "://" in paths[-1]:
        try:
            args.address = read_address(paths.pop())
        except argparse.ArgumentTypeError as error:
            parser.error(f"argument address: {error}")
    elif args.address is None:
        parser.error("the following arguments are required: address")
    if not paths:
        parser.error("argument --logging-paths/-lp: expected at least one path before the address")
    for path in paths:
        problem = logging_path_problem(path)
        if problem:
            parser.error(f"argument --logging-paths/-lp: {problem}")
    args.logging_paths = tuple(paths)
    return args


def check_curve_keys(parser: argparse.ArgumentParser, resolve: Callable[..., object], *paths: str | None) -> None:
    """The keys given, completed from the environment, must make a pair: else a parser error."""
    try:
        resolve(*paths)
    except ValueError as error:
        parser.error(str(error))

