"""The 100k-task example of the product README: 100,000 submits on a local scheduler and 10 workers.

`python examples/calculate.py N` submits N tasks instead (the test suite runs it smaller).
"""

import random
import sys

from scaler import Client, SchedulerClusterCombo


def calculate(sec: int):
    return sec * 1


def main(n_tasks: int = 100_000):
    # No address: the scheduler takes a free local port, so this runs beside any scheduler already
    # listening (the README starts `scaler_scheduler` on port 2345).
    cluster = SchedulerClusterCombo(n_workers=10)
    client = Client(address=cluster.get_address())

    tasks = [random.randint(0, 100) for _ in range(n_tasks)]
    futures = [client.submit(calculate, i) for i in tasks]

    results = [future.result() for future in futures]

    assert results == tasks
    print(f"{len(results)} tasks done")

    client.disconnect()
    cluster.shutdown()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:2]))
