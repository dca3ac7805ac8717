"""Pieces shared by the console scripts: the parser every one of them builds from its option table, and what
they do with it before they start.

Every value is checked by the parser, so that a bad one ends in argparse's short message and exit
status 2, before anything starts: never a traceback, never a value that fails later on the wire.
"""

from __future__ import annotations

import argparse
from typing import Callable, Sequence

from scaler.utility.command_logging import announce_ignored_options, start_logging
from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS, logging_path_problem
from scaler.utility.option_table import POSITIONAL, OptionTable, parser_for
from scaler.utility.text_rules import read_address

__all__ = ["announce_ignored_options", "check_curve_keys", "make_parser", "parse_command_line", "start_logging"]


def make_parser(prog: str, description: str, table: OptionTable) -> argparse.ArgumentParser:
    """A parser with every option of `table`. The usage line is written out: the address is optional to argparse
    only so that `--logging-paths x.log ADDRESS` can be read (see parse_command_line)."""
    positionals = " ".join(option.name for option in table if option.form == POSITIONAL)
    return parser_for(table, prog, description, usage=f"{prog} [options] {positionals}")


def parse_command_line(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """parse_args, then the checks that need several values: the address (which `--logging-paths a.log
    ADDRESS` hands to the paths, as a list option before a positional does in argparse) and the paths."""
    args = parser.parse_args(argv)
    if not hasattr(args, "logging_paths"):
        if args.address is None:
            parser.error("the following arguments are required: address")
        return args
    paths = list(args.logging_paths)
    if args.address is None:
        if paths and tuple(paths) != DEFAULT_LOGGING_PATHS and "://" in paths[-1]:
            try:
                args.address = read_address(paths.pop())
            except argparse.ArgumentTypeError as error:
                parser.error(f"argument address: {error}")
        else:
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

