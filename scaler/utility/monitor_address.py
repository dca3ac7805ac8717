"""Where a scheduler publishes its monitor feed unless told otherwise: derived from its own address.

The scheduler binds it; scaler_top's hint, the Slurm adapter and a notebook's summary of a client find it
the same way.
"""

from __future__ import annotations

# Where default monitor addresses live (the product documents show /tmp, whatever TMPDIR says).
MONITOR_DIRECTORY = "/tmp"


def default_monitor_address(address: str) -> str:
    """tcp://127.0.0.1:2345 -> ipc:///tmp/127.0.0.1_2345_monitor, as the product documents show (of a list of
    schedulers, the first's)."""
    address = address.split(",", 1)[0].strip()
    scheme, _, rest = address.partition("://")
    if scheme == "tcp":
        host, _, port = rest.rpartition(":")
        return f"ipc://{MONITOR_DIRECTORY}/{host}_{port}_monitor"
    return f"{address}_monitor"
