"""Pieces shared by the console scripts: the parser every one of them uses, and the checks of its values.

Every value is checked by the parser, so that a bad one ends in argparse's short message and exit
status 2, before anything starts: never a traceback, never a value that fails later on the wire.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from typing import Any, Callable, Sequence

from scaler.store.server_config import tcp_bind_address
from scaler.utility.curve import AUTHORIZED_KEYS_ENV, SCHEDULER_SECRET_KEY_ENV, SECRET_KEY_ENV, SERVER_KEY_ENV
from scaler.utility.ignored_settings import IgnoredSetting
from scaler.utility.logging_setup import DEFAULT_LOGGING_PATHS, LOGGING_LEVELS, logging_path_problem, setup_logging
from scaler.utility.setting_rules import Rule, argument_type
from scaler.utility.zmq_config import parse_zmq_address


def make_parser(prog: str, description: str) -> argparse.ArgumentParser:
    # The usage line is written out: the address is optional to argparse only so that
    # `--logging-paths x.log ADDRESS` can be read (see parse_command_line).
    return argparse.ArgumentParser(
        prog, description=description, usage=f"{prog} [options] address",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )


def zmq_address(text: str) -> str:
    """argparse type: a ZeroMQ address, checked by the same parser Client uses."""
    try:
        return parse_zmq_address(text).to_address()
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def store_data_address(text: str) -> str:
    """argparse type: the address a store binds its data port to (tcp://HOST picks a free port)."""
    try:
        tcp_bind_address(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


# An option that sets a numeric config field: the field's name, the option's flags, its help.
Setting = tuple[str, tuple[str, ...], str]


def add_settings(parser: argparse.ArgumentParser, config_class: type, settings: Sequence[Setting]) -> None:
    """Options that set config fields: each one's default is the field's, its values are held to the field's
    rule by the parser, and it is stored under the field's name (see `config_from_arguments`)."""
    fields = {field.name: field for field in dataclasses.fields(config_class)}
    for field_name, flags, help_text in settings:
        field = fields[field_name]
        metavar = flags[0].lstrip("-").replace("-", "_").upper()
        parser.add_argument(
            *flags, type=argument_type(field.metadata["rule"]), default=field.default, dest=field_name,
            metavar=metavar, help=help_text,
        )


def config_from_arguments(config_class: type, args: argparse.Namespace) -> Any:
    """The config made of every parsed option stored under one of its field names."""
    names = {field.name for field in dataclasses.fields(config_class)}
    return config_class(**{name: value for name, value in vars(args).items() if name in names})


def add_address_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("address", nargs="?", type=zmq_address, default=None, help=help_text)


def add_logging_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--logging-paths", "-lp", nargs="+", type=str, default=DEFAULT_LOGGING_PATHS, metavar="PATH",
        help="where to write the log, one or more paths; /dev/stdout and /dev/stderr are the terminal. "
        "Given before the address, the last value is taken as the address if it is one "
        "(or end the list with --)",
    )
    parser.add_argument(
        "--logging-level", "-ll", type=str.upper, choices=LOGGING_LEVELS, default="INFO", help="logging level"
    )
    parser.add_argument(
        "--logging-config-file", "-lc", type=existing_file, default=None,
        help="a Python logging .conf file (logging.config.fileConfig format); overrides the two options above",
    )


class _NoteIgnoredOption(argparse.Action):
    """Checks the value (by the option's type) and notes that it was given; stores nothing in the namespace."""

    def __init__(self, *args: Any, setting: IgnoredSetting, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting = setting

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        given = dict(getattr(namespace, _IGNORED_GIVEN))  # a copy: the default is shared by every parse
        given[self.option_strings[0]] = (self.const if self.nargs == 0 else values, self.setting.why)
        setattr(namespace, _IGNORED_GIVEN, given)


_IGNORED_GIVEN = "ignored_options_given"


def add_ignored_option(parser: argparse.ArgumentParser, setting: IgnoredSetting, *flags: str, **kwargs: Any) -> None:
    """An option of Scaler 1.9.x that has no effect here: its value is checked (`type=`, `choices=`), and
    the log says once that it was given (see `announce_ignored_options`)."""
    if isinstance(setting.default, bool):
        kwargs.update(nargs=0, const=True)
    parser.add_argument(
        *flags, action=_NoteIgnoredOption, setting=setting, default=setting.default, dest=setting.name,
        help=f"accepted for compatibility with Scaler 1.9.x; no effect: {setting.why}", **kwargs,
    )
    parser.set_defaults(**{_IGNORED_GIVEN: {}})


def announce_ignored_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Say once, and only to whoever gave it, that an option changes nothing."""
    for flag, (value, why) in getattr(args, _IGNORED_GIVEN, {}).items():
        shown = flag if value is True else f"{flag} {value}"
        logging.info(f"{parser.prog}: {shown} is accepted for compatibility with Scaler 1.9.x and has no effect: {why}")


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
                args.address = zmq_address(paths.pop())
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


def start_logging(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """setup_logging, with what can still go wrong (a malformed config file, a disk gone) as a parser error;
    then the first lines: which of the given options have no effect."""
    try:
        setup_logging(args.logging_paths, args.logging_level, args.logging_config_file)
    except Exception as error:  # fileConfig raises KeyError, configparser errors, OSError...
        what = f"--logging-config-file {args.logging_config_file}" if args.logging_config_file else "logging"
        parser.error(f"{what}: cannot set up logging: {type(error).__name__}: {error}")
    announce_ignored_options(parser, args)


def check_curve_keys(parser: argparse.ArgumentParser, resolve: Callable[..., object], *paths: str | None) -> None:
    """The keys given, completed from the environment, must make a pair: else a parser error."""
    try:
        resolve(*paths)
    except ValueError as error:
        parser.error(str(error))


def add_final_arguments(parser: argparse.ArgumentParser, address_help: str) -> None:
    """What every command line that runs a peer ends with: the logging options, then the address."""
    add_logging_arguments(parser)
    add_address_argument(parser, address_help)


def existing_file(text: str) -> str:
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    if not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: permission denied")
    return text


def existing_directory(text: str) -> str:
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"no such directory: {text!r}")
    return text


def add_scheduler_curve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--curve-secret-key", type=curve_secret_key_file, default=None,
        help=f"CURVE: this scheduler's .key_secret file (see scaler_keygen); or {SCHEDULER_SECRET_KEY_ENV}",
    )
    parser.add_argument(
        "--curve-authorized-keys", type=existing_directory, default=None,
        help=f"CURVE: directory of the public .key files of clients and workers to accept; or {AUTHORIZED_KEYS_ENV}",
    )


def add_peer_curve_arguments(parser: argparse.ArgumentParser) -> None:
    """The keys of workers (scaler_cluster); a client takes the same two as Client(...) keywords."""
    parser.add_argument(
        "--curve-server-key", type=curve_public_key_file, default=None,
        help=f"CURVE: the scheduler's public .key file; or {SERVER_KEY_ENV}",
    )
    parser.add_argument(
        "--curve-secret-key", type=curve_secret_key_file, default=None,
        help="CURVE: this cluster's .key_secret file (its public key must be authorized by the scheduler); "
        f"or {SECRET_KEY_ENV}",
    )


def curve_public_key_file(text: str) -> str:
    """argparse type: a CURVE certificate file holding a public key (NAME.key, from scaler_keygen)."""
    _load_certificate(existing_file(text))
    return text


def curve_secret_key_file(text: str) -> str:
    """argparse type: a CURVE certificate file holding a secret key (NAME.key_secret, from scaler_keygen)."""
    _, secret = _load_certificate(existing_file(text))
    if secret is None:
        raise argparse.ArgumentTypeError(f"{text!r} holds no secret key; give the .key_secret file")
    return text


def _load_certificate(path: str) -> tuple[bytes, bytes | None]:
    import zmq.auth  # where keys are given: see scaler/utility/curve.py

    try:
        return zmq.auth.load_certificate(path)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise argparse.ArgumentTypeError(f"{path!r} is not a key file made by scaler_keygen: {error}") from None


def number_type(kind: type, minimum: float, maximum: float) -> Any:
    """argparse type for a number that sets no config field (a count, a port)."""
    return argument_type(Rule(kind, minimum, maximum))
