"""One client process of benchmarks/scale.py: connects, warms up, says `ready`, waits for `go`, works, prints JSON.

    python benchmarks/scale_client.py ADDRESS ROLE [--tasks N] [--seconds S] [--chunk N]

Roles (all with the native worker's `echo` as the no-op task, in the neutral encoding):
- map:   one `client.map` of N tasks; prints its start and end (time.time()) and checks every result.
- flood: `client.map`s of --chunk tasks, one after the other, until S seconds after `go`.
- probe: single round trips `submit(echo, i).result()` until S seconds after `go`; prints each one's seconds.

The parent (scale.py) starts many of these at once and writes `go` to all of them when all said `ready`,
so that the clock starts with every client connected and its code paths warm.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from scaler import Client
from scaler.native_tasks import NeutralSerializer, native

CLIENT_TIMEOUT_SECONDS = 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address")
    parser.add_argument("role", choices=["map", "flood", "probe"])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--chunk", type=int, default=10_000)
    args = parser.parse_args()
    echo = native("echo")
    with Client(address=args.address, serializer=NeutralSerializer(), timeout_seconds=CLIENT_TIMEOUT_SECONDS) as client:
        assert client.map(echo, [(index,) for index in range(100)]) == list(range(100))  # warm up
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return
        started = time.time()
        report: dict = {"role": args.role, "started": started}
        if args.role == "map":
            results = client.map(echo, [(index,) for index in range(args.tasks)])
            report["tasks"] = len(results)
            report["correct"] = results == list(range(args.tasks))
        elif args.role == "flood":
            done = 0
            while time.time() - started < args.seconds:
                done += len(client.map(echo, [(index,) for index in range(args.chunk)]))
            report["tasks"] = done
        else:
            samples = []
            index = 0
            while time.time() - started < args.seconds:
                sent = time.perf_counter()
                assert client.submit(echo, index).result(timeout=CLIENT_TIMEOUT_SECONDS) == index
                samples.append(time.perf_counter() - sent)
                index += 1
            report["samples"] = samples
        report["ended"] = time.time()
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
