"""Scaler: a light, fast and reliable distributed task framework."""

from scaler.about import __version__
from scaler.client.client import Client
from scaler.client.future import ScalerFuture
from scaler.client.serializer import Serializer
from scaler.cluster.combo import SchedulerClusterCombo

__all__ = ["Client", "ScalerFuture", "SchedulerClusterCombo", "Serializer", "__version__"]
