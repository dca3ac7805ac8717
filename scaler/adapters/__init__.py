"""Workers on a resource manager, started and stopped with the load: the adapter interface, its
implementations (local processes, Slurm), and the adaptive scaler that drives them."""

from scaler.adapters.adaptive_scaler import AdaptiveScaler
from scaler.adapters.local import LocalProcessAdapter
from scaler.adapters.scaling_policy import ScalingSettings
from scaler.adapters.worker_adapter import GroupState, WorkerAdapter, WorkerGroup

__all__ = [
    "AdaptiveScaler",
    "GroupState",
    "LocalProcessAdapter",
    "ScalingSettings",
    "WorkerAdapter",
    "WorkerGroup",
]
