"""The payload frames of one message, handed out by the number its control frame names each by."""

from __future__ import annotations

from collections.abc import Sequence

from scaler.protocol.message_types import Buffer, ProtocolDecodeError


class FrameTable:
    """Hands out payload frames by number, each at most once, and checks that none is left over."""

    def __init__(self, frames: Sequence[Buffer]) -> None:
        self._frames = frames
        self._used: set[int] = set()

    def take(self, number: int) -> Buffer:
        if not 0 < number < len(self._frames) or number in self._used:
            raise ProtocolDecodeError(f"payload frame {number} is missing or named twice")
        self._used.add(number)
        return self._frames[number]

    def place(self, payloads: list[Buffer], indices: Sequence[int], numbers: Sequence[int]) -> None:
        if len(indices) != len(numbers):
            raise ProtocolDecodeError("frame index and frame number lists differ in length")
        for index, number in zip(indices, numbers):
            if index >= len(payloads):
                raise ProtocolDecodeError(f"payload index {index} is out of range")
            payloads[index] = self.take(number)

    def check_all_used(self) -> None:
        if len(self._used) != len(self._frames) - 1:
            raise ProtocolDecodeError(f"{len(self._frames) - 1 - len(self._used)} payload frame(s) are not named")
