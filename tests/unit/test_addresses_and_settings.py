"""The address parser every entry point shares, and the rules settings are held to (pure functions)."""

from __future__ import annotations

import argparse

import pytest

from scaler.utility.setting_rules import POSITIVE_SECONDS, TASKS_WAITING, argument_type
from scaler.utility.zmq_config import ZMQConfig, ZMQType, parse_zmq_address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tcp://127.0.0.1:2345", ZMQConfig(ZMQType.tcp, "127.0.0.1", 2345)),
        ("tcp://*:1", ZMQConfig(ZMQType.tcp, "*", 1)),
        ("tcp://[::1]:65535", ZMQConfig(ZMQType.tcp, "[::1]", 65535)),
        ("tcp://scheduler.example.com:2345", ZMQConfig(ZMQType.tcp, "scheduler.example.com", 2345)),
        ("ipc:///tmp/scaler.sock", ZMQConfig(ZMQType.ipc, "/tmp/scaler.sock")),
        ("ipc://@abstract", ZMQConfig(ZMQType.ipc, "@abstract")),
        ("inproc://name", ZMQConfig(ZMQType.inproc, "name")),
    ],
)
def test_valid_addresses_read_back_as_written(text: str, expected: ZMQConfig) -> None:
    assert parse_zmq_address(text) == expected
    assert expected.to_address() == text
    assert ZMQConfig.from_string(text) == expected


@pytest.mark.parametrize(
    "text",
    ["http://127.0.0.1:80", "127.0.0.1:2345", "tcp://127.0.0.1", "tcp://:2345", "tcp://127.0.0.1:0",
     "tcp://127.0.0.1:99999", "tcp://127.0.0.1:port", "tcp://a b:1", "tcp://[::1:2345", "tcp://", "ipc://",
     " tcp://127.0.0.1:2345", "ipc:///" + "x" * 200, "", "TCP://127.0.0.1:2345"],
)
def test_invalid_addresses_say_what_a_valid_one_looks_like(text: str) -> None:
    with pytest.raises(ValueError, match=r"tcp://127\.0\.0\.1:2345"):
        parse_zmq_address(text)


def test_a_non_string_address_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="must be a string"):
        parse_zmq_address(2345)


@pytest.mark.parametrize("value", [-1, 0, 0.0, float("nan"), float("inf"), 4_294_968])
def test_positive_seconds_refuse_what_cannot_work_or_travel(value: float) -> None:
    with pytest.raises(ValueError, match="above 0 and at most 4294967"):
        POSITIVE_SECONDS.check(value)


@pytest.mark.parametrize("value", [True, "5", None])
def test_a_number_rule_refuses_what_is_not_a_number(value: object) -> None:
    with pytest.raises(TypeError):
        POSITIVE_SECONDS.check(value)


def test_special_values_outside_the_range_are_named_and_allowed() -> None:
    assert TASKS_WAITING.check(-1) == -1
    with pytest.raises(ValueError, match=", or -1"):
        TASKS_WAITING.check(-2)


def test_the_argparse_type_gives_the_rule_in_its_message() -> None:
    convert = argument_type(POSITIVE_SECONDS)
    assert convert("2.5") == 2.5
    with pytest.raises(argparse.ArgumentTypeError, match=r"above 0 .* got '-1'"):
        convert("-1")
    with pytest.raises(argparse.ArgumentTypeError, match="got 'soon'"):
        convert("soon")
