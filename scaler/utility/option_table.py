"""One table per command: every option's name, default, rule and help, written once.

Everything else is derived from the table: the command line (`add_to_parser`), the defaults of the Python
config dataclasses (`field`), the keywords of SchedulerClusterCombo and Cluster (scaler/cluster/settings.py),
the command line a parent gives a child it starts (`command_line`), and the option tables of
docs/configuration.md (scaler/cli/option_docs.py); tests/unit/test_option_tables.py checks that each
derivation agrees.

An option's `name` is its long option with underscores (`--per-worker-task-queue-size` is
`per_worker_task_queue_size`; a switch `--no-store` is `store`): it is the argparse dest, and the key of a
config file (one section per command, named by the table's `section`): a file's value, checked by the
option's rule (scaler/utility/config_file.py), becomes the parser's default, so the command line still
wins (scaler/utility/command_parser.py). `field` is the config field it sets when that differs (the 1.9.x
option names).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Iterable, Iterator, Protocol

from scaler.utility.ignored_settings import IgnoredSetting
from scaler.utility.setting_rules import Rule

# How an option is written on the command line.
VALUE = "value"  # --name VALUE
LIST = "list"  # --name VALUE [VALUE ...]
REPEATED = "repeated"  # --name VALUE, given again for each more value
SWITCH = "switch"  # --name / --no-name
ON_SWITCH = "on_switch"  # --name turns it on (off by default)
OFF_SWITCH = "off_switch"  # --no-name turns it off (on by default)
POSITIONAL = "positional"  # VALUE, in order, without a flag
FORMS = (VALUE, LIST, REPEATED, SWITCH, ON_SWITCH, OFF_SWITCH, POSITIONAL)


class ValueRule(Protocol):
    def describe(self) -> str: ...

    def parse(self, text: str) -> Any: ...

    def check(self, value: Any) -> Any: ...


@dataclasses.dataclass(frozen=True)
class Option:
    name: str
    default: Any
    rule: ValueRule
    help: str
    flags: tuple[str, ...] = ()  # other spellings, e.g. ("-it",)
    field: str = ""  # the config field it sets; empty: `name`
    form: str = VALUE
    metavar: str | None = None
    required: bool = False
    # What -h and the docs say for a default that its value alone would misstate (a machine's, a derived one).
    default_text: str | None = None
    # An option of Scaler 1.9.x accepted with no effect: checked, and the log says once that it was given.
    ignored: IgnoredSetting | None = None
    # More than -h has room for: docs/configuration.md adds it after `help` (scaler/cli/option_docs.py).
    doc: str = ""

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"option {self.name}: unknown form {self.form!r}")

    @property
    def config_field(self) -> str:
        return self.field or self.name

    @property
    def long_flag(self) -> str:
        dashed = self.name.replace("_", "-")
        if self.form == POSITIONAL:
            return self.name
        return f"--no-{dashed}" if self.form == OFF_SWITCH else f"--{dashed}"

    def shown_default(self) -> str | None:
        """The default as -h and the docs state it; None where there is none to state (a switch whose absence
        is the default, a value nobody need give, a required one)."""
        if self.default_text is not None:
            return self.default_text
        if self.form == SWITCH:
            return self.long_flag if self.default else f"--no-{self.name.replace('_', '-')}"
        if self.form in (ON_SWITCH, OFF_SWITCH, POSITIONAL) or self.required:
            return None
        if self.default is None or self.default in ("", (), []):
            return None
        if isinstance(self.default, (tuple, list)):
            return " ".join(str(item) for item in self.default)
        return str(self.default)

    def described_help(self) -> str:
        shown = self.shown_default()
        return f"{self.help} (default: {shown})" if shown is not None else self.help


class OptionTable:
    """The options of one command, in the order -h lists them; `section` names it in a config file."""

    def __init__(self, section: str, *groups: Iterable[Option]) -> None:
        self.section = section
        self.options: tuple[Option, ...] = tuple(option for group in groups for option in group)
        self._by_name = {option.name: option for option in self.options}
        if len(self._by_name) != len(self.options):
            raise ValueError(f"{section}: an option name is given twice")
        spellings = [flag for option in self.options for flag in (option.long_flag, *option.flags)]
        if len(set(spellings)) != len(spellings):
            raise ValueError(f"{section}: an option spelling is given twice")

    def __iter__(self) -> Iterator[Option]:
        return iter(self.options)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Option:
        return self._by_name[name]

    def setting_options(self) -> tuple[Option, ...]:
        """Every option but those of 1.9.x that have no effect."""
        return tuple(option for option in self.options if option.ignored is None)

    def for_field(self, field_name: str) -> Option:
        for option in self.options:
            if option.config_field == field_name and option.ignored is None:
                return option
        raise KeyError(f"{self.section}: no option sets {field_name!r}")

    def default(self, field_name: str) -> Any:
        return self.for_field(field_name).default

    def field(self, field_name: str) -> Any:
        """A config dataclass field with this table's default; a number also with its rule, which
        `check_settings` holds it to (see setting_rules.py)."""
        option = self.for_field(field_name)
        metadata: dict[str, Any] = {"option": option}
        if isinstance(option.rule, Rule):
            metadata["rule"] = option.rule
        default = option.default
        if isinstance(default, list):
            return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
        return dataclasses.field(default=default, metadata=metadata)

    # ------------------------------------------------------------------------------------------ command line

    def add_to_parser(self, parser: argparse.ArgumentParser) -> None:
        for option in self.options:
            add_option(parser, option)

    def config_values(self, config_class: type, namespace: argparse.Namespace) -> dict[str, Any]:
        """The keywords of `config_class` that the parsed options set."""
        names = {field.name for field in dataclasses.fields(config_class)}
        return {
            option.config_field: getattr(namespace, option.name)
            for option in self.setting_options() if option.config_field in names
        }

    def command_line(self, values: dict[str, Any]) -> list[str]:
        """The arguments that give a child process these values (by option name): options, then `--` and the
        positionals. A float goes as its repr, so that the child reads back exactly the value checked here."""
        options: list[str] = []
        positionals: list[str] = []
        for name, value in values.items():
            option = self[name]
            if option.form == POSITIONAL:
                positionals.append(str(value))
            elif option.form == SWITCH:
                options.append(option.long_flag if value else f"--no-{name.replace('_', '-')}")
            elif option.form == ON_SWITCH:
                options += [option.long_flag] if value else []
            elif option.form == OFF_SWITCH:
                options += [] if value else [option.long_flag]
            elif value is None:
                continue
            elif option.form == LIST:
                options += [option.long_flag, *(str(item) for item in value)]
            elif option.form == REPEATED:
                for item in value:
                    options += [f"{option.long_flag}={item}"]
            elif isinstance(value, (tuple, list)):  # names, tags: comma-separated
                options += [option.long_flag, ",".join(str(item) for item in value)]
            else:
                options += [option.long_flag, repr(value) if isinstance(value, float) else str(value)]
        return options + (["--", *positionals] if positionals else [])


def add_option(parser: argparse.ArgumentParser, option: Option) -> argparse.Action:
    """The argparse argument of `option`; its help states the default itself (Option.described_help)."""
    kwargs: dict[str, Any] = {"default": option.default}
    flags: tuple[str, ...] = (option.long_flag, *option.flags)
    rule = option.rule
    if option.form in (VALUE, LIST, REPEATED, POSITIONAL):
        kwargs["type"] = _argparse_type(rule)
        choices = getattr(rule, "choices", None)
        if choices is not None:
            kwargs["choices"] = choices
        elif option.form != POSITIONAL:
            kwargs["metavar"] = option.metavar or _metavar(option)
        if option.form == LIST:
            kwargs["nargs"] = "+"
        elif option.form == REPEATED:
            kwargs["action"] = "append"
        elif option.form == POSITIONAL and not option.required:
            kwargs["nargs"] = "?"
    elif option.form == SWITCH:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif option.form == ON_SWITCH:
        kwargs.update(nargs=0, const=True)
    elif option.form == OFF_SWITCH:
        kwargs.update(nargs=0, const=False)
    if option.form != POSITIONAL:
        kwargs["dest"] = option.name
        kwargs["required"] = option.required
    if option.ignored is not None:
        kwargs.update(action=_NoteIgnoredOption, setting=option.ignored)
        parser.set_defaults(**{IGNORED_GIVEN: {}})
    elif option.form in (ON_SWITCH, OFF_SWITCH):
        kwargs["action"] = "store_const"
        del kwargs["nargs"]
    action = parser.add_argument(*flags, **kwargs)
    # Set afterwards: BooleanOptionalAction would append a "(default: True)" of its own.
    action.help = option.described_help().replace("%", "%%")
    return action


def _metavar(option: Option) -> str:
    """What the value is, in a word: SECONDS, BYTES, N, or the option's name."""
    for ending in ("seconds", "bytes", "address"):
        if option.name.endswith(ending):
            return ending.upper()
    if isinstance(option.rule, Rule) and option.rule.kind is int:
        return "N"
    return option.name.upper()


def _argparse_type(rule: ValueRule) -> Any:
    def convert(text: str) -> Any:
        return rule.parse(text)

    kind = getattr(rule, "kind", None)
    convert.__name__ = kind.__name__ if kind is not None else "value"
    return convert


# Where the parsed namespace notes the 1.9.x options given that have no effect: flag -> (value, why).
IGNORED_GIVEN = "ignored_options_given"


class _NoteIgnoredOption(argparse.Action):
    """Checks the value (by the option's type) and notes that it was given; stores nothing in the namespace."""

    def __init__(self, *args: Any, setting: IgnoredSetting, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting = setting

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        given = dict(getattr(namespace, IGNORED_GIVEN))  # a copy: the default is shared by every parse
        given[self.option_strings[0]] = (self.const if self.nargs == 0 else values, self.setting.why)
        setattr(namespace, IGNORED_GIVEN, given)


def ignored_option(setting: IgnoredSetting, rule: ValueRule, *flags: str) -> Option:
    """An option of Scaler 1.9.x that has no effect here (its value is still checked)."""
    return Option(
        setting.name, setting.default, rule, f"accepted for compatibility with Scaler 1.9.x; no effect: {setting.why}",
        flags=flags, form=ON_SWITCH if isinstance(setting.default, bool) else VALUE, ignored=setting,
    )
