"""What values a setting that is not a number takes: an address, a file, a word from a list, a list, a switch.

Each rule answers what the numeric rules of setting_rules.py answer: `describe()`, `parse(text)` for a
command line (argparse.ArgumentTypeError, which argparse prints after the option's name: so a message
never names the option itself) and `check(value)` for a value given from Python or a config file
(TypeError for the wrong type, ValueError for a wrong value).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any, Callable, Iterable

from scaler.utility.logging_setup import logging_path_problem
from scaler.utility.scheduler_addresses import join_scheduler_addresses, parse_scheduler_addresses
from scaler.utility.tags import checked_tags
from scaler.utility.wording import with_article
from scaler.utility.zmq_config import EXAMPLES, parse_zmq_address


@dataclasses.dataclass(frozen=True)
class TextRule:
    """A string, read (checked and normalized) by `read`, which raises argparse.ArgumentTypeError."""

    description: str
    read: Callable[[str], Any] | None = None

    def describe(self) -> str:
        return self.description

    def parse(self, text: str) -> Any:
        return self.read(text) if self.read is not None else text

    def check(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise TypeError(f"must be {self.description}, got {with_article(type(value).__name__)}: {value!r}")
        try:
            return self.parse(value)
        except argparse.ArgumentTypeError as error:
            raise ValueError(str(error)) from None


@dataclasses.dataclass(frozen=True)
class ChoiceRule:
    """One word of `choices`, in any case when `upper` (written in capitals)."""

    choices: tuple[str, ...]
    upper: bool = False

    def describe(self) -> str:
        return "one of " + ", ".join(self.choices)

    def parse(self, text: str) -> str:
        """Only normalizes: argparse checks `choices` itself and lists them in the usage."""
        return text.upper() if self.upper else text

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or self.parse(value) not in self.choices:
            raise ValueError(f"must be {self.describe()}, got {value!r}")
        return self.parse(value)


@dataclasses.dataclass(frozen=True)
class SwitchRule:
    """On or off: a switch on the command line, True or False from Python or a file."""

    def describe(self) -> str:
        return "true or false"

    def parse(self, text: str) -> bool:
        raise argparse.ArgumentTypeError("a switch takes no value")

    def check(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise TypeError(f"must be True or False, got {value!r}")
        return value


@dataclasses.dataclass(frozen=True)
class ListRule:
    """One or more values, each held to `item` (several values after one option, or a list)."""

    item: TextRule
    # What the command line reads each value with, when it is checked later (the logging paths).
    item_as_given: TextRule | None = None

    def describe(self) -> str:
        return f"one or more of: {self.item.describe()}"

    def parse(self, text: str) -> Any:
        return (self.item_as_given or self.item).parse(text)

    def check(self, value: Any) -> tuple[Any, ...]:
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
            raise TypeError(f"must be a non-empty list, each {self.item.describe()}, got {value!r}")
        return tuple(self.item.check(item) for item in value)


@dataclasses.dataclass(frozen=True)
class TagsRule:
    """Worker tags: `gpu,fast` on a command line, a list or set of strings from Python or a file."""

    def describe(self) -> str:
        return "comma-separated tags (non-empty words)"

    def parse(self, text: str) -> tuple[str, ...]:
        try:
            return self.check([tag.strip() for tag in text.split(",")] if text else [])
        except (TypeError, ValueError) as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    def check(self, value: Any) -> tuple[str, ...]:
        try:
            return checked_tags(value, "tags")
        except (TypeError, ValueError) as error:
            # checked_tags names where the tags came from; here the caller does that
            raise type(error)(str(error).removeprefix("tags: ")) from None


@dataclasses.dataclass(frozen=True)
class NamesRule:
    """Non-empty names: `a,b` on a command line, a list of strings from Python or a file."""

    what: str  # "a worker name"

    def describe(self) -> str:
        return f"comma-separated names, each {self.what}"

    def parse(self, text: str) -> tuple[str, ...]:
        try:
            return self.check([name.strip() for name in text.split(",")])
        except (TypeError, ValueError) as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    def check(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise TypeError(f"must be a list of names, got {value!r}")
        for name in value:
            if not isinstance(name, str):
                raise TypeError(f"{self.what} must be a str, got {with_article(type(name).__name__)}: {name!r}")
            if not name or name != name.strip():
                raise ValueError(f"{self.what} is empty or has spaces around it: {name!r}")
        return tuple(value)


def read_address(text: str) -> str:
    """A ZeroMQ address, read by the same parser Client uses."""
    try:
        return parse_zmq_address(text).to_address()
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def read_scheduler_addresses(text: str) -> str:
    """One or more scheduler addresses, comma-separated (utility/scheduler_addresses.py), normalized."""
    try:
        return join_scheduler_addresses(parse_scheduler_addresses(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def read_existing_file(text: str) -> str:
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    if not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: permission denied")
    return text


def read_existing_directory(text: str) -> str:
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"no such directory: {text!r}")
    return text


def read_logging_path(text: str) -> str:
    problem = logging_path_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def read_curve_public_key_file(text: str) -> str:
    """A CURVE certificate file holding a public key (NAME.key, from scaler_keygen)."""
    _load_certificate(read_existing_file(text))
    return text


def read_curve_secret_key_file(text: str) -> str:
    """A CURVE certificate file holding a secret key (NAME.key_secret, from scaler_keygen)."""
    _, secret = _load_certificate(read_existing_file(text))
    if secret is None:
        raise argparse.ArgumentTypeError(f"{text!r} holds no secret key; give the .key_secret file")
    return text


def _load_certificate(path: str) -> tuple[bytes, bytes | None]:
    import zmq.auth  # only where keys are given: see scaler/utility/curve.py

    try:
        return zmq.auth.load_certificate(path)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise argparse.ArgumentTypeError(f"{path!r} is not a key file made by scaler_keygen: {error}") from None


def read_word(what: str) -> Callable[[str], str]:
    """A non-empty string without surrounding spaces (a name, a host)."""

    def read(text: str) -> str:
        if not text or text != text.strip():
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return text

    return read


ADDRESS = TextRule(f"a ZeroMQ address such as {EXAMPLES}", read_address)
SCHEDULER_ADDRESSES = TextRule(
    "one or more scheduler addresses, comma-separated, e.g. tcp://a:2345,tcp://b:2345", read_scheduler_addresses
)
TEXT = TextRule("a string")
EXISTING_FILE = TextRule("a readable file", read_existing_file)
EXISTING_DIRECTORY = TextRule("a directory", read_existing_directory)
CURVE_PUBLIC_KEY = TextRule("a public .key file made by scaler_keygen", read_curve_public_key_file)
CURVE_SECRET_KEY = TextRule("a .key_secret file made by scaler_keygen", read_curve_secret_key_file)
# On a command line the paths are checked once the address has been told from them (cli/common.py).
LOGGING_PATHS = ListRule(
    TextRule("a file in an existing directory, /dev/stdout or /dev/stderr", read_logging_path),
    TextRule("a path"),
)
ON_OR_OFF = SwitchRule()
TAGS = TagsRule()


def one_of(choices: Iterable[str], upper: bool = False) -> ChoiceRule:
    return ChoiceRule(tuple(choices), upper)
