"""What a Client passed into a task carries (its pickle), to connect from there as it would."""

from __future__ import annotations

import dataclasses

from scaler.protocol.serializer import DefaultSerializer, Serializer
from scaler.protocol.sharing import DEFAULT_SHARE


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    """What a Client passed into a task carries (its pickle), to connect from there as it would.

    CURVE keys are the files given as options, read again on the worker (the same paths on one machine
    or a shared file system); keys not given are taken from the worker's environment, as for any client.
    """

    address: str
    serializer: Serializer
    timeout_seconds: float
    heartbeat_interval_seconds: float
    name: str = ""
    profiling: bool = False
    curve_server_key: str | None = None
    curve_secret_key: str | None = None
    wait_for_tags_seconds: float | None = None
    share: float = DEFAULT_SHARE
    stream_output: bool = False

    def reuse_key(self) -> tuple:
        """Settings equal but for the serializer instance (each unpickling makes a new one) share a client."""
        serializer_class = type(self.serializer)
        return (*dataclasses.astuple(dataclasses.replace(self, serializer=DefaultSerializer())),
                serializer_class.__module__, serializer_class.__qualname__)
