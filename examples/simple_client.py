"""Submit single tasks with Client.submit and collect their results."""

import math

from scaler import Client, SchedulerClusterCombo


def square(value: int) -> int:
    return value * value


def main() -> None:
    # A scheduler and two workers on this machine; with no address it picks a free local one.
    cluster = SchedulerClusterCombo(n_workers=2)

    with Client(address=cluster.get_address()) as client:
        future = client.submit(math.sqrt, 16)
        print(future.result())  # 4.0

        futures = [client.submit(square, i) for i in range(10)]
        print([future.result() for future in futures])  # [0, 1, 4, ..., 81]

    cluster.shutdown()


if __name__ == "__main__":
    main()
