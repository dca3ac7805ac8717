"""The parser of a command built from its option table, which also reads `--config FILE.toml`.

The file's section (scaler/utility/config_file.py checks it) gives the parser its defaults for that one
parse, so the command line wins over the file and the file over the table's defaults. A positional the file
gives (a 1.9.x-style ADDRESS) becomes optional on the command line. A file's error ends the command as any
bad option does: one line naming the file, the key and the rule, exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any, Iterator, Sequence

from scaler.utility.config_file import ConfigFileError, read_section
from scaler.utility.option_table import (
    IGNORED_GIVEN,
    POSITIONAL,
    REPEATED,
    Option,
    OptionTable,
    add_option,
)
from scaler.utility.text_rules import TextRule

# Where the parsed namespace keeps the values the file gave (by option name), for the checks that need to know.
FILE_VALUES = "config_file_values"
CONFIG_FLAG = "--config"


def config_option(section: str) -> Option:
    """`--config FILE`: not an option of the table (no config dataclass or keyword takes it), added to its parser."""
    return Option(
        "config", None, TextRule("a TOML file"),
        f"read option values from the [{section}] section of this TOML file; the command line wins over it",
        metavar="FILE",
        doc="Keys are the long options with underscores; sections of the other commands are passed over "
        "(see Configuration files above).",
    )


class TableParser(argparse.ArgumentParser):
    """An ArgumentParser that knows its table and applies the config file's values for each parse.

    `file_argument`: the positional that names the file (`scaler FILE.toml`); else the file is `--config`'s.
    """

    def __init__(self, *args: Any, table: OptionTable, file_argument: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.table = table
        self.file_argument = file_argument

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        arguments = list(sys.argv[1:] if args is None else args)
        path = self._config_path(arguments)
        if path is None:
            parsed, extras = super().parse_known_args(arguments, namespace)
            self._check_config_was_read(parsed, None)
            return parsed, extras
        try:
            values = read_section(path, self.table)
        except ConfigFileError as error:
            self.exit(2, f"{self.prog}: error: {error}\n")
        with _file_defaults(self, self.table, values) as repeated:
            parsed, extras = super().parse_known_args(arguments, namespace)
        for name, from_file in repeated.items():
            given = getattr(parsed, name)
            if given is not from_file:  # the command line's values, appended to a copy of the file's: theirs win
                setattr(parsed, name, given[len(from_file):])
        self._check_config_was_read(parsed, path)
        setattr(parsed, FILE_VALUES, values)
        return parsed, extras

    def _config_path(self, arguments: list[str]) -> str | None:
        if self.file_argument is not None:  # a first parse without the file finds it (and any bad option)
            known, _ = argparse.ArgumentParser.parse_known_args(self, arguments)
            return getattr(known, self.file_argument)
        path = None
        for index, argument in enumerate(arguments):
            if argument == "--":
                break
            if argument == CONFIG_FLAG and index + 1 < len(arguments):
                path = arguments[index + 1]
            elif argument.startswith(CONFIG_FLAG + "="):
                path = argument[len(CONFIG_FLAG) + 1:]
        return path

    def _check_config_was_read(self, parsed: argparse.Namespace, path: str | None) -> None:
        if self.file_argument is None and getattr(parsed, "config", None) != path:
            self.error(f"write {CONFIG_FLAG} FILE in full (it is read before the other options)")


@contextlib.contextmanager
def _file_defaults(
    parser: argparse.ArgumentParser, table: OptionTable, values: dict[str, Any]
) -> Iterator[dict[str, list[Any]]]:
    """The file's values as the parser's defaults, for one parse; yields the repeated options' lists."""
    saved = [(action, action.default, action.nargs, action.required) for action in parser._actions]
    saved_defaults = dict(parser._defaults)
    repeated: dict[str, list[Any]] = {}
    ignored: dict[str, tuple[Any, str]] = {}
    try:
        for name, value in values.items():
            option = table[name]
            if option.ignored is not None:
                ignored[option.long_flag] = (value, option.ignored.why)
                continue
            if option.form == REPEATED:
                value = repeated[name] = list(value)
            for action in parser._actions:
                if action.dest != name:
                    continue
                action.default = value
                if option.form == POSITIONAL and action.nargs is None:
                    action.nargs = "?"
                    action.required = False
        if ignored:
            parser.set_defaults(**{IGNORED_GIVEN: {**parser._defaults.get(IGNORED_GIVEN, {}), **ignored}})
        yield repeated
    finally:
        for action, default, nargs, required in saved:
            action.default, action.nargs, action.required = default, nargs, required
        parser._defaults.clear()
        parser._defaults.update(saved_defaults)


def parser_for(
    table: OptionTable | None, prog: str, description: str, usage: str | None = None,
    file_argument: str | None = None,
) -> argparse.ArgumentParser:
    """A parser with every option of `table`, and `--config FILE` (unless the file is the positional named
    `file_argument`)."""
    if table is None:
        return argparse.ArgumentParser(prog, description=description, usage=usage, formatter_class=HelpFormatter)
    parser = TableParser(
        prog, description=description, usage=usage, formatter_class=HelpFormatter, table=table,
        file_argument=file_argument,
    )
    if file_argument is None:
        add_option(parser, config_option(table.section))
    table.add_to_parser(parser)
    return parser


class HelpFormatter(argparse.HelpFormatter):
    """Each option's help already states its default (Option.described_help); nothing is added here."""
