"""What values a numeric setting takes, declared once in its command's option table and checked at every entry.

Every rule (these for numbers, scaler/utility/text_rules.py for the rest) answers three questions:
`describe()` (for the help, the docs and the errors), `parse(text)` (a value from a command line, or
argparse.ArgumentTypeError: argparse's short message) and `check(value)` (a value given from Python or a
config file, or TypeError/ValueError). A config dataclass takes its field from the table
(scaler/utility/option_table.py); `check_settings(config)` (called by the config's `__post_init__`) holds
each numeric field to its rule. Every rule also keeps its values within what the wire carries (a timeout
travels in milliseconds as a 32-bit number), so no accepted value can fail to encode later.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any, Callable

# Welcome carries timeouts and intervals in milliseconds as UInt32.
MAX_SECONDS = (2**32 - 1) // 1000
_MAX_U32 = 2**32 - 1
_MAX_I63 = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class Rule:
    kind: type  # int or float
    minimum: float
    maximum: float
    above_minimum: bool = False  # the minimum itself is not allowed
    special: tuple[int, ...] = ()  # allowed outside the range, e.g. -1 for "no limit"

    def describe(self) -> str:
        what = "a number" if self.kind is float else "a whole number"
        low, high = _plain(self.minimum), _plain(self.maximum)
        text = f"{what} {'above' if self.above_minimum else 'at least'} {low} and at most {high}"
        return text + "".join(f", or {value}" for value in self.special)

    def check(self, value: Any) -> Any:
        """The value if the rule allows it; ValueError (TypeError for a non-number) otherwise."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            self.kind is int and not isinstance(value, int)
        ):
            raise TypeError(f"must be {self.describe()}, got {value!r}")
        if value in self.special:
            return value
        low_ok = value > self.minimum if self.above_minimum else value >= self.minimum
        if not (math.isfinite(value) and low_ok and value <= self.maximum):
            raise ValueError(f"must be {self.describe()}, got {value!r}")
        return value

    def parse(self, text: str) -> Any:
        """The value a command line gives as `text`, or argparse.ArgumentTypeError naming the rule."""
        try:
            return self.check(self.kind(text))
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}") from None


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


POSITIVE_SECONDS = Rule(float, 0, MAX_SECONDS, above_minimum=True)
SECONDS_OR_OFF = Rule(float, 0, MAX_SECONDS)  # 0 turns the feature off
AT_LEAST_ONE = Rule(int, 1, 2**31 - 1)
IO_THREADS = Rule(int, 1, 1024)
TASK_SLOTS = Rule(int, 1, _MAX_U32)  # a worker's capacity travels as UInt32
TASK_SLOTS_OR_ANY = Rule(int, 0, _MAX_U32)  # 0: no cap
TASKS_WAITING = Rule(int, 0, _MAX_I63, special=(-1,))  # -1: no limit
BYTES_OR_OFF = Rule(int, 0, _MAX_I63)  # 0: no limit
# Below a few KiB not even the handshake fits in a frame.
FRAME_BYTES = Rule(int, 4096, _MAX_I63)
FRAME_BYTES_OR_UNLIMITED = Rule(int, 4096, _MAX_I63, special=(-1,))


def setting(default: Any, rule: Rule) -> Any:
    """A dataclass field whose values `check_settings` holds to `rule`."""
    return dataclasses.field(default=default, metadata={"rule": rule})


def check_settings(config: Any) -> None:
    """Raise ValueError (or TypeError) naming the first field of `config` outside its rule."""
    for field in dataclasses.fields(config):
        rule = field.metadata.get("rule")
        if rule is None:
            continue
        try:
            rule.check(getattr(config, field.name))
        except (TypeError, ValueError) as error:
            raise type(error)(f"{field.name} {error}") from None


def argument_type(rule: Rule) -> Callable[[str], Any]:
    """An argparse `type=` that reads a number and holds it to `rule`, with argparse's short error."""

    def convert(text: str) -> Any:
        return rule.parse(text)

    convert.__name__ = rule.kind.__name__
    return convert
