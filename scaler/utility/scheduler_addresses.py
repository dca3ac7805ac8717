"""Several scheduler addresses in one string: the syntax every peer of a cluster with standby schedulers reads.

A client, a worker (`scaler_cluster`), a store and `scaler_top` take the scheduler's address as one string,
from the command line, a config file, `Client(address=...)` or the SCALER_ADDRESS environment variable. A
comma-separated list (`tcp://a:2345,tcp://b:2345`) names the scheduler and its standbys in rank order, so the
same string works in all those places (an environment variable cannot repeat an option). Peers try the first
address first and move on to the next when one is silent or says it stands by (protocol/address_rotation.py).
"""

from __future__ import annotations

from scaler.utility.zmq_config import parse_zmq_address

SEPARATOR = ","


def parse_scheduler_addresses(text: object) -> tuple[str, ...]:
    """The addresses of `text` in order, each normalized; a ValueError names the one that is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"scheduler addresses must be a string such as tcp://a:2345,tcp://b:2345, got {text!r}")
    addresses = tuple(parse_zmq_address(part.strip()).to_address() for part in text.split(SEPARATOR))
    if len(set(addresses)) != len(addresses):
        raise ValueError(f"{text!r} names a scheduler address twice; list each scheduler once, in rank order")
    return addresses


def first_scheduler_address(text: str) -> str:
    """The first (the preferred) scheduler of a list: what a single-address use (the host a store routes
    to, the default monitor feed) derives from."""
    return text.split(SEPARATOR, 1)[0].strip()


def join_scheduler_addresses(addresses: tuple[str, ...]) -> str:
    return SEPARATOR.join(addresses)
