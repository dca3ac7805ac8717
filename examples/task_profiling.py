"""Task profiling as document 003 shows it, on a local cluster."""

from scaler import Client, SchedulerClusterCombo


def calculate(sec: int):
    return sec * 1


def main():
    cluster = SchedulerClusterCombo(n_workers=1)
    client = Client(address=cluster.get_address())
    fut = client.submit(calculate, 1, profiling=True)

    # this will execute the task
    fut.result()

    # contains task run duration time in microseconds
    print("duration_us", fut.profiling_info().duration_us)

    # contains the peak memory usage in bytes for the task, this memory peak is sampled every second
    print("peak_memory", fut.profiling_info().peak_memory)

    client.disconnect()
    cluster.shutdown()


if __name__ == "__main__":
    main()
