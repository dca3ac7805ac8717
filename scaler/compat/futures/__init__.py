"""`concurrent.futures` on Scaler: `ScalerExecutor` is an Executor whose calls run on a cluster.

    from scaler.compat.futures import ScalerExecutor

    with ScalerExecutor() as executor:           # was: ProcessPoolExecutor()
        results = list(executor.map(work, items))
"""

from scaler.compat.futures.broken import BrokenScalerExecutor
from scaler.compat.futures.executor import ScalerExecutor

__all__ = ["BrokenScalerExecutor", "ScalerExecutor"]
