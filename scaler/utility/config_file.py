"""Reading a command's options from a TOML file: text in, checked values (by option name) or a ConfigFileError.

One file may describe a whole site: each command reads its own section (`[scheduler]`, `[cluster]`, ...:
its table's `section`) and passes over the other commands' sections, so that `scaler_cluster --config
site.toml` and `scaler site.toml` read the same file. Any other section or top-level key is an error: a
misspelt `[schedular]` would otherwise change nothing, silently. Keys are option names (`num_of_workers`;
`num-of-workers` too); each value is held to the rule its option has on the command line, and an error
names the file, the section, the key and the rule. The caller (scaler/utility/option_table.py) makes the
values the parser's defaults, so the command line still wins.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from scaler.utility.option_table import LIST, OFF_SWITCH, ON_SWITCH, REPEATED, SWITCH, Option, OptionTable

# Every section a Scaler config file may hold: one per command (`site` is `scaler FILE.toml`'s own).
SECTIONS = ("scheduler", "cluster", "store", "slurm_cluster", "symphony_cluster", "top", "ui", "site")


class ConfigFileError(Exception):
    """What is wrong with a config file, in one line that names the file (and the key, when one is wrong)."""


def read_document(path: str) -> dict[str, Any]:
    """The file's TOML, with its sections checked against SECTIONS."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as error:
        raise ConfigFileError(f"cannot read the config file {path!r}: {error.strerror or error}") from None
    return parse_document(data.decode("utf-8", errors="replace"), path)


def parse_document(text: str, path: str) -> dict[str, Any]:
    # Imported when a file is read: every command line imports this module, few are given a --config file, and
    # the TOML parser (its regular expressions, datetime) costs ~6 ms of CPU to import.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigFileError(f"{path}: not valid TOML: {error}") from None
    for name, value in document.items():
        if name not in SECTIONS:
            raise ConfigFileError(
                f"{path}: unknown {'section [' + name + ']' if isinstance(value, dict) else 'key ' + repr(name)}"
                f"{_suggestion(name, SECTIONS)}; a config file holds the sections "
                + ", ".join(f"[{section}]" for section in SECTIONS)
            )
        if not isinstance(value, dict):
            raise ConfigFileError(
                f"{path}: [{name}] must be one table of options ([{name}] then key = value lines), "
                f"got {'several ([[' + name + ']])' if isinstance(value, list) else repr(value)}"
            )
    return document


def section_values(document: dict[str, Any], path: str, table: OptionTable) -> dict[str, Any]:
    """The values of `table`'s section of a parsed document, each checked, by option name ({} if no section)."""
    section = document.get(table.section, {})
    values: dict[str, Any] = {}
    for key, value in section.items():
        name = key.replace("-", "_")
        where = f"{path}: [{table.section}] {key}"
        if name not in table or name == "config":
            known = [option.name for option in table]
            raise ConfigFileError(
                f"{where}: unknown key{_suggestion(name, known)}; the keys of [{table.section}] are its command's "
                "long options with underscores (docs/configuration.md)"
            )
        if name in values:
            raise ConfigFileError(f"{where}: given twice (with dashes and with underscores)")
        try:
            values[name] = checked_value(table[name], value)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as error:
            raise ConfigFileError(f"{where} = {_shown(value)}: {error}") from None
    return values


def read_section(path: str, table: OptionTable) -> dict[str, Any]:
    return section_values(read_document(path), path, table)


def checked_value(option: Option, value: Any) -> Any:
    """`value` as the command line would have set the option, held to the same rule; TypeError/ValueError."""
    if option.form in (SWITCH, ON_SWITCH, OFF_SWITCH):
        if not isinstance(value, bool):
            raise TypeError(f"must be true or false, got {_shown(value)}")
        return value
    if option.form in (LIST, REPEATED):
        items = [value] if isinstance(value, (str, int, float)) and not isinstance(value, bool) else value
        if not isinstance(items, list) or (option.form == LIST and not items):
            raise TypeError(f"must be a non-empty list (or one value), each {_item_rule(option)}")
        if option.form == LIST:
            return option.rule.check(items)
        return [option.rule.check(_as_kind(option, item)) for item in items]
    return option.rule.check(_as_kind(option, value))


def _as_kind(option: Option, value: Any) -> Any:
    """TOML writes 2 for a float option's 2.0: read it as the command line would ("2" -> 2.0)."""
    if getattr(option.rule, "kind", None) is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _item_rule(option: Option) -> str:
    item = getattr(option.rule, "item", None)
    return (item or option.rule).describe()


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _suggestion(name: str, known: Any) -> str:
    import difflib  # an error's path only

    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""
