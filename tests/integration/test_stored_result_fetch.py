"""A client fetches results kept in stores off its I/O thread (scaler/client/stored_results.py), with real
processes: a store that stops answering holds up only the results it holds, never the client's other
results, heartbeats or submissions. The store is stopped with SIGSTOP, as a machine that hangs."""

from __future__ import annotations

import functools
import operator
import signal
import sys
import threading

import psutil
import pytest

from scaler import Client, SchedulerClusterCombo
from scaler.client import stored_results
from scaler.store.store_client import StoreClient
from tests.integration import waiting
from tests.integration.test_fault_injection import DeliverySpy
from tests.integration.waiting import wait_for_file

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the store's shared memory is Linux only"),
]

WAIT_SECONDS = 60.0  # an upper bound against hangs, never a measure
wait_until = functools.partial(waiting.wait_until, timeout=WAIT_SECONDS)
RESULT_BYTES = 8 << 20


def large_result_after(running_path: str, go_path: str) -> bytes:
    with open(running_path, "w"):
        pass
    wait_for_file(go_path, WAIT_SECONDS)
    return b"r" * RESULT_BYTES


def test_a_fetch_from_a_stopped_store_holds_up_no_other_result(tmp_path, monkeypatch) -> None:
    # A fetch from a store that does not answer waits long (as for a large object on a slow link), far longer
    # than the small task's result below is given to arrive.
    monkeypatch.setattr(stored_results, "FETCH_WAIT_BASE_SECONDS", 100.0)
    running, go, armed = (str(tmp_path / name) for name in ("running", "go", "armed"))
    store_stopped = threading.Event()
    with SchedulerClusterCombo(n_workers=2, logging_level="WARNING") as combo, \
            Client(address=combo.get_address(), timeout_seconds=120) as client:
        (store_process,) = [
            child for child in psutil.Process(combo.cluster_pid).children(recursive=True)
            if "scaler.cli.store" in " ".join(child.cmdline())
        ]
        wait_until(lambda: client._connection.stores.home, "the client's home store")
        home = client._connection.stores.address_of(client._connection.stores.home)
        assert home is not None
        spy = DeliverySpy(client)
        try:
            large = client.submit(large_result_after, running, go)
            wait_for_file(running, WAIT_SECONDS)
            # The client's I/O thread runs done-callbacks: this one holds it until the store is stopped, so that
            # the large result, stored meanwhile, is fetched only from the stopped store.
            gate = client.submit(wait_for_file, armed, WAIT_SECONDS)
            gate.add_done_callback(lambda _: store_stopped.wait(WAIT_SECONDS))
            with StoreClient(home, local=True, timeout_seconds=10) as reader:
                held_before = reader.status().object_count
                with open(armed, "w"):
                    pass
                wait_until(gate.done, "the gate task ended")
                with open(go, "w"):
                    pass
                wait_until(lambda: reader.status().object_count > held_before, "the large result is stored")
            store_process.send_signal(signal.SIGSTOP)
            store_stopped.set()

            small = client.submit(operator.neg, 7)
            assert small.result(timeout=WAIT_SECONDS / 3) == -7
            assert not large.done(), "the large result came from a stopped store"
        finally:
            store_stopped.set()
            store_process.send_signal(signal.SIGCONT)
        assert large.result(timeout=WAIT_SECONDS) == b"r" * RESULT_BYTES
        spy.assert_exactly_once([large, gate, small])
