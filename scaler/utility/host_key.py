"""Which processes can share memory: those with the same host key.

`<boot id>/<network namespace inode>`: two processes on one running kernel and in one network namespace
reach each other's shared memory (through /proc) and each other's ipc:// sockets. Network-namespace
"hosts", as the partition tests make them, then count as separate machines, as they must.
"""

from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=1)
def this_host_key() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot_id_file:
            boot_id = boot_id_file.read().strip()
        namespace = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        # Not Linux (or no /proc): nothing is shared, so a key no other process has.
        return f"unshared/{os.getpid()}/{id(os)}"
    return f"{boot_id}/{namespace}"
