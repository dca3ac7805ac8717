"""Object transfer through the store (issue 15): one process writes, another reads, both timed per object.

    python benchmarks/store_transfer.py [--objects 20] [--megabytes 50]

For `bytes` and for NumPy arrays, each on a fresh store:
  local, first touch   writer: allocate + write + seal into new segments (their pages faulted in fresh)
  local, recycled      the same after the first objects were deleted: their segments are reused
  remote (tcp)         writer: put over tcp loopback; reader: get over tcp loopback
The writer and the reader are separate processes, started before any clock. A read is `get` (for a
local array: map the segment, a view) and then touching every page of the result (reading one byte
per 4 KiB), so a lazily mapped array pays for its page faults in the figure. Prints medians per
object and MB/s (MB = 10^6 bytes), and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from scaler.store.store_client import StoreAddress, StoreClient
from scaler.store.store_process import StoreProcess

PAGE = 4096


def make_value(kind: str, size: int, seed: int) -> object:
    data = np.full(size // 8, seed, dtype=np.int64)
    return data.tobytes() if kind == "bytes" else data


def touch(value: object) -> int:
    """Read one byte of every page, as a task reading its input would at least do."""
    view = np.frombuffer(value, dtype=np.uint8) if isinstance(value, bytes) else value.view(np.uint8).reshape(-1)
    return int(view[::PAGE].sum())


def object_id(prefix: str, index: int) -> bytes:
    return f"{prefix}-{index}".encode().ljust(16, b".")


def write(address: StoreAddress, local: bool, kind: str, size: int, prefix: str, count: int) -> list[float]:
    values = [make_value(kind, size, index) for index in range(count)]  # made before the clock
    seconds = []
    with StoreClient(address, local=local) as client:
        for index, value in enumerate(values):
            started = time.perf_counter()
            client.put(object_id(prefix, index), value)
            seconds.append(time.perf_counter() - started)
    return seconds


def read(address: StoreAddress, local: bool, prefix: str, count: int) -> list[tuple[float, float]]:
    samples = []
    with StoreClient(address, local=local) as client:
        for index in range(count):
            started = time.perf_counter()
            value = client.get(object_id(prefix, index))
            got = time.perf_counter()
            touch(value)
            samples.append((got - started, time.perf_counter() - started))
            del value
    return samples


def run_child(role: str, address: StoreAddress, local: bool, kind: str, size: int, prefix: str, count: int) -> list:
    command = [
        sys.executable, __file__, "--role", role, "--address", json.dumps(address.__dict__), "--kind", kind,
        "--bytes", str(size), "--prefix", prefix, "--objects", str(count), *(["--local"] if local else []),
    ]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if finished.returncode != 0:
        raise RuntimeError(f"{role} failed:\n{finished.stderr}")
    return json.loads(finished.stdout)


def megabytes_per_second(size: int, seconds: float) -> float:
    return size / seconds / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--megabytes", type=int, default=50)
    parser.add_argument("--role", choices=["writer", "reader"], help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--local", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role is not None:
        address = StoreAddress(**json.loads(args.address))
        if args.role == "writer":
            print(json.dumps(write(address, args.local, args.kind, args.bytes, args.prefix, args.objects)))
        else:
            print(json.dumps(read(address, args.local, args.prefix, args.objects)))
        return

    size = args.megabytes * 10**6 // 8 * 8
    count = args.objects
    print(f"store transfer: {count} x {size / 1e6:.0f} MB, writer and reader in separate processes")
    print(f"load average before: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    rows = []
    with tempfile.TemporaryDirectory() as spill_directory:
        for kind in ("bytes", "numpy"):
            # A fresh store per kind, large enough for every object: nothing is spilled.
            with StoreProcess.start(capacity_bytes=4 * count * size, spill_directory=spill_directory,
                                    pool_idle_seconds=3600) as store:
                with StoreClient(store.address) as admin:
                    for phase, local, prefix in (
                        ("local, first touch", True, "fresh"),
                        ("local, recycled", True, "again"),
                        ("remote (tcp loopback)", False, "remote"),
                    ):
                        writes = run_child("writer", store.address, local, kind, size, prefix, count)
                        reads = run_child("reader", store.address, local, kind, size, prefix, count)
                        rows.append((kind, phase, statistics.median(writes),
                                     statistics.median(get for get, _ in reads),
                                     statistics.median(total for _, total in reads)))
                        admin.delete([object_id(prefix, index) for index in range(count)])
                        time.sleep(0.5)  # the reader's releases and the deletes are one-way messages
    headers = ["kind", "path", "write ms", "write MB/s", "get ms", "get+touch ms", "read MB/s", "write+read MB/s"]
    table = [
        [kind, phase, f"{write_s * 1e3:.1f}", f"{megabytes_per_second(size, write_s):,.0f}", f"{get_s * 1e3:.2f}",
         f"{read_s * 1e3:.1f}", f"{megabytes_per_second(size, read_s):,.0f}",
         f"{megabytes_per_second(size, write_s + read_s):,.0f}"]
        for kind, phase, write_s, get_s, read_s in rows
    ]
    widths = [max(len(headers[column]), *(len(row[column]) for row in table)) for column in range(len(headers))]
    print()
    print("| " + " | ".join(header.ljust(width) for header, width in zip(headers, widths)) + " |")
    print("| " + " | ".join("-" * width if column < 2 else "-" * (width - 1) + ":"
                            for column, width in enumerate(widths)) + " |")
    for row in table:
        print("| " + " | ".join(cell.ljust(width) if column < 2 else cell.rjust(width)
                                for column, (cell, width) in enumerate(zip(row, widths))) + " |")
    print()
    print("medians per object; read counts get + touching every page; write+read: one object from writer to reader")
    print(f"load average after: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")


if __name__ == "__main__":
    main()
