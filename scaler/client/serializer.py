"""Where users import the serializer from (`from scaler.client.serializer import Serializer`); it lives in
scaler/protocol/serializer.py, where the worker's processor may import it too."""

from scaler.protocol.serializer import DefaultSerializer, Serializer, loads

__all__ = ["DefaultSerializer", "Serializer", "loads"]
