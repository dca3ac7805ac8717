"""Run one function over many argument tuples with Client.map."""

import math

from scaler import Client, SchedulerClusterCombo


def main() -> None:
    cluster = SchedulerClusterCombo(n_workers=2)

    with Client(address=cluster.get_address()) as client:
        # Each item is the tuple of arguments of one call; the function is serialized once.
        results = client.map(math.sqrt, [(i,) for i in range(100)])
        print(sum(results))  # 661.46...

    cluster.shutdown()


if __name__ == "__main__":
    main()
