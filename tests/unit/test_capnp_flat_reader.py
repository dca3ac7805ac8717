"""The codec without pycapnp's private reader class: found at import when it works, and decoding through the public
`from_bytes` when it is not there, every message kind alike."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from message_strategies import MESSAGE_TYPES, message_strategies

from scaler.protocol import capnp_codec
from scaler.protocol import messages as m
from scaler.protocol.capnp_flat_reader import flat_reader_class

STRATEGIES = message_strategies()


@pytest.fixture
def without_the_private_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capnp_codec, "_FlatReader", None)


def test_this_pycapnp_has_the_private_class() -> None:
    # The fast path is the one in use; if this fails after an upgrade of pycapnp, decoding still works (below).
    assert capnp_codec._FlatReader is not None


def test_a_pycapnp_without_the_private_attribute_gets_none() -> None:
    @contextlib.contextmanager
    def from_bytes(frame: bytes):
        yield SimpleNamespace(to_dict=dict)  # a reader with no `_parent`

    message = SimpleNamespace(new_message=lambda: SimpleNamespace(to_bytes=lambda: b"\0" * 8), from_bytes=from_bytes)
    assert flat_reader_class(message) is None


def test_a_private_class_that_reads_differently_gets_none() -> None:
    class OtherReader:
        def __init__(self, frame: bytes, traversal_limit: int, nesting_limit: int) -> None:
            pass

        def get_root(self, schema: object) -> SimpleNamespace:
            return SimpleNamespace(to_dict=lambda: {"other": 1})

    @contextlib.contextmanager
    def from_bytes(frame: bytes):
        yield SimpleNamespace(_parent=OtherReader(frame, 0, 0), to_dict=dict)

    message = SimpleNamespace(
        new_message=lambda: SimpleNamespace(to_bytes=lambda: b"\0" * 8), from_bytes=from_bytes, schema=None
    )
    assert flat_reader_class(message) is None


@pytest.mark.parametrize("kind", MESSAGE_TYPES, ids=lambda kind: kind.__name__)
@settings(database=None, derandomize=True, deadline=None, max_examples=10,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_message_kind_decodes_alike_through_from_bytes(without_the_private_class: None, kind, data) -> None:
    message = data.draw(STRATEGIES[kind])
    frames = m.encode(message)
    assert m.decode(frames) == message
    unaligned = memoryview(b"\0" + bytes(frames[0]))[1:]
    assert m.decode([unaligned, *frames[1:]]) == message
    ids = m.decode_ids(frames)
    if not isinstance(message, (m.TaskSubmission, m.TaskResults)):
        assert ids == message


def test_a_malformed_frame_is_a_protocol_error_through_from_bytes(without_the_private_class: None) -> None:
    with pytest.raises(m.ProtocolDecodeError):
        m.decode([b"\xff" * 24])
    with pytest.raises(m.ProtocolDecodeError):
        m.decode([b"\x01\x02\x03"])
