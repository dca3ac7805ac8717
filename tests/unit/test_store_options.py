"""The store's options: bad values are one-line parser errors before anything starts; where a store listens."""

from __future__ import annotations

import pytest

from scaler.cli.store import build_parser
from scaler.cluster.store_settings import default_data_address
from scaler.store.server_config import tcp_bind_address


@pytest.mark.parametrize(
    "address, bind",
    [
        ("tcp://127.0.0.1", "tcp://127.0.0.1:*"),
        ("tcp://127.0.0.1:2346", "tcp://127.0.0.1:2346"),
        ("tcp://[::1]", "tcp://[::1]:*"),
        ("tcp://[::1]:2346", "tcp://[::1]:2346"),
        ("tcp://store-host", "tcp://store-host:*"),
    ],
)
def test_a_data_address_without_a_port_binds_a_free_one(address: str, bind: str) -> None:
    assert tcp_bind_address(address) == bind


@pytest.mark.parametrize(
    "address, message",
    [
        ("tcp://", "needs a host"),
        ("tcp://0.0.0.0", "not a wildcard"),
        ("tcp://*:2346", "not a wildcard"),
        ("ipc:///tmp/x", "tcp://HOST or tcp://HOST:PORT"),
        ("tcp://127.0.0.1:99999", "port must be"),
        ("127.0.0.1", "not a ZeroMQ address"),
    ],
)
def test_a_bad_data_address_is_named(address: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tcp_bind_address(address)


@pytest.mark.parametrize(
    "arguments, message",
    [
        # the rules of scaler_cluster's --store-capacity-bytes and of every other number (setting_rules.py)
        (["--capacity-bytes", "-1"], "must be a whole number at least 0"),
        (["--capacity-bytes", "lots"], "got 'lots'"),
        (["--data-address", "tcp://0.0.0.0"], "not a wildcard"),
        (["--spill-directory", "/no/such/directory"], "no such directory"),
        (["--host-key", "two words"], "one word"),
        (["--pool-idle-seconds", "-5"], "must be a number at least 0"),
    ],
)
def test_bad_options_are_parser_errors(arguments: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(arguments)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_defaults_need_no_option() -> None:
    args = build_parser().parse_args([])
    assert args.data_address == "tcp://127.0.0.1" and args.capacity_bytes is None and args.spill_directory is None


@pytest.mark.parametrize(("scheduler", "expected"), [
    ("tcp://127.0.0.1:2345", "tcp://127.0.0.1"),
    ("ipc:///tmp/scheduler.sock", "tcp://127.0.0.1"),
    ("inproc://scheduler", "tcp://127.0.0.1"),
])
def test_a_cluster_store_is_reached_where_its_scheduler_reaches_this_host(scheduler: str, expected: str) -> None:
    assert default_data_address(scheduler) == expected


def test_a_cluster_store_address_is_never_a_wildcard() -> None:
    # Whatever interface routes to a remote scheduler, it is a concrete address peers can connect to.
    address = default_data_address("tcp://192.0.2.1:2345")
    assert address.startswith("tcp://") and tcp_bind_address(address).endswith(":*")
