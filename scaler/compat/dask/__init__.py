"""Run dask collections on a Scaler cluster: `dask.compute(x, scheduler=scaler.get)`.

The cluster is the client given to `use(client_or_address)` (also a context manager), else the
address in the `SCALER_ADDRESS` environment variable, else an embedded local cluster started on first
use (one worker per core) and shut down at interpreter exit.

Importing this package does not import dask; calling `get` does.
"""

from scaler.compat.cluster_choice import current_client, use
from scaler.compat.dask.scheduler import get

__all__ = ["current_client", "get", "use"]
