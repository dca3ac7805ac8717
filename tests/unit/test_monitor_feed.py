"""The monitor feed: a core's status survives encode/decode, bad frames are refused, and the PUB/SUB
pair delivers snapshots in-process over an ipc socket in a temporary folder (no processes)."""

from __future__ import annotations

import dataclasses
import logging
import os
import time

import pytest
import zmq
from core_harness import SimulatedCluster
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.protocol import messages as m
from scaler.protocol.monitor_messages import (
    FEED_VERSION,
    ClientStatus,
    MonitorDecodeError,
    MonitorSnapshot,
    StoreStatus,
    TaskCounts,
    WorkerStatus,
    decode_snapshot,
    encode_snapshot,
)
from scaler.scheduler.monitor import MonitorPublisher
from scaler.ui.feed import MonitorSubscriber
from scaler.ui.top_screen import render

pytestmark = pytest.mark.timeout(30)


def snapshot_of(status, **server_figures) -> MonitorSnapshot:
    """The snapshot the server makes of a core's status (SchedulerServer._monitor_snapshot)."""
    return MonitorSnapshot(
        tasks=status.tasks, clients=status.clients, object_count=status.object_count,
        object_bytes=status.object_bytes, workers=status.workers, waiting_for_tags=status.waiting_for_tags,
        **server_figures,
    )


def status_of_busy_cluster() -> MonitorSnapshot:
    """A real core's status (plus what the server adds) with tasks in several states."""
    cluster = SimulatedCluster()
    client = cluster.add_client()
    busy = cluster.add_worker(capacity=4)
    cluster.add_worker(capacity=4, tags=["python", "native"])  # idle: the tasks fit on... whichever; totals only
    cluster.submit(client, 6)
    cluster.submit(client, 2, tags=["gpu"])  # no worker has it: they wait, counted by tag set
    cluster.complete(busy, 2)
    cluster.send(busy.identity, m.Heartbeat(
        cpu_percent=12.5, rss_bytes=50 << 20, queued_tasks=1,
        processor_cpu_percent=99.0, processor_rss_bytes=60 << 20, latency_us=700,
    ))
    return snapshot_of(
        cluster.core.status(cluster.now + 0.5),
        scheduler_cpu_percent=3.5,
        scheduler_rss_bytes=40 << 20,
        sent={"Welcome": 3, "TaskSubmission": 2},
        received={"Hello": 3, "Heartbeat": 1},
    )


def test_a_core_status_round_trips_through_the_feed() -> None:
    status = status_of_busy_cluster()
    status.sequence, status.published_at = 7, 1_700_000_000.25
    snapshot = decode_snapshot(encode_snapshot(status))

    assert snapshot.feed_version == FEED_VERSION
    assert snapshot.sequence == 7
    assert snapshot.published_at == pytest.approx(1_700_000_000.25)
    assert snapshot.scheduler_cpu_percent == pytest.approx(3.5)
    assert snapshot.scheduler_rss_bytes == 40 << 20
    assert snapshot.tasks == status.tasks
    assert snapshot.tasks.success == 2 and snapshot.tasks.running + snapshot.tasks.unassigned == 4 + 2
    assert snapshot.sent == status.sent and snapshot.received == status.received
    assert snapshot.clients == status.clients
    assert (snapshot.object_count, snapshot.object_bytes) == (status.object_count, status.object_bytes)
    by_name = {worker.name: worker for worker in snapshot.workers}
    assert set(by_name) == {worker.name for worker in status.workers}
    for expected in status.workers:
        worker = by_name[expected.name]
        assert (worker.capacity, worker.free, worker.sent, worker.assigned, worker.queued) == (
            expected.capacity, expected.free, expected.sent, expected.assigned, expected.queued
        )
        assert worker.processor_rss_bytes == expected.processor_rss_bytes
        assert worker.latency_us == expected.latency_us
        assert worker.seconds_since_heard == pytest.approx(expected.seconds_since_heard, abs=1e-3)
        assert worker.tags == expected.tags
    assert sorted(worker.tags for worker in snapshot.workers) == [[], ["native", "python"]]
    assert [(wait.tags, wait.tasks) for wait in snapshot.waiting_for_tags] == [(["gpu"], 2)]


def test_client_rows_carry_queued_running_oldest_wait_and_share() -> None:
    cluster = SimulatedCluster()
    cluster.add_worker(capacity=2)
    busy, idle = cluster.add_client(), cluster.add_client()
    cluster.submit(busy, 7)
    cluster.core.peers.clients[idle.identity].share = 2.5
    status = cluster.core.status(cluster.now + 1.25)
    snapshot = decode_snapshot(encode_snapshot(MonitorSnapshot(clients=status.clients)))
    assert [(c.name, c.tasks, c.queued, c.running, c.oldest_ready_seconds, c.share) for c in snapshot.clients] == [
        ("client-0", 7, 5, 2, 1.25, 1.0), ("client-1", 0, 0, 0, 0.0, 2.5),
    ]


def test_a_share_that_is_no_weight_is_sent_as_the_default() -> None:
    rows = [ClientStatus(name=str(share), share=share) for share in (0.0, -1.0, float("nan"), float("inf"), 0.5)]
    snapshot = decode_snapshot(encode_snapshot(MonitorSnapshot(clients=rows)))
    assert [client.share for client in snapshot.clients] == [1.0, 1.0, 1.0, 1.0, 0.5]


# The feed as written before client rows had queued, running, oldestReadySeconds and share (same ordinals).
_OLD_SCHEMA = """@0xd4b5c6e7f8091a2b;
struct MonitorSnapshot {
  feedVersion @0 :UInt32;
  sequence @1 :UInt64;
  publishedAtUs @2 :UInt64;
  scheduler @3 :SchedulerUsage;
  tasks @4 :TaskCounts;
  sent @5 :List(MessageCount);
  received @6 :List(MessageCount);
  clients @7 :List(ClientStatus);
}
struct SchedulerUsage { cpuPercent @0 :Float32; rssBytes @1 :UInt64; }
struct TaskCounts { unassigned @0 :UInt64; running @1 :UInt64; }
struct MessageCount { name @0 :Text; count @1 :UInt64; }
struct ClientStatus { name @0 :Text; tasks @1 :UInt64; objects @2 :UInt64; objectBytes @3 :UInt64; }
"""


def test_a_feed_from_before_the_client_counts_reads_them_as_defaults(tmp_path) -> None:
    import capnp

    schema_path = tmp_path / "old_monitor.capnp"
    schema_path.write_text(_OLD_SCHEMA)
    old = capnp.load(str(schema_path))
    builder = old.MonitorSnapshot.new_message()
    builder.feedVersion = 1
    builder.sequence = 3
    builder.init("tasks").unassigned = 4
    (client,) = builder.init("clients", 1)
    client.name, client.tasks, client.objects, client.objectBytes = "old-client", 4, 1, 32

    snapshot = decode_snapshot(builder.to_bytes())
    assert snapshot.sequence == 3 and snapshot.tasks.unassigned == 4
    assert snapshot.clients == [ClientStatus(name="old-client", tasks=4, objects=1, object_bytes=32)]
    assert (snapshot.clients[0].queued, snapshot.clients[0].share) == (0, 1.0)
    assert snapshot.workers == [] and snapshot.stores == []


def test_store_rows_show_what_each_store_holds_and_its_workers() -> None:
    cluster = SimulatedCluster()
    quiet = cluster.add_store("tcp://10.0.0.2:1", capacity_bytes=500)
    busy = cluster.add_store("tcp://10.0.0.1:1", capacity_bytes=1 << 30)
    cluster.add_worker(store="tcp://10.0.0.1:1")
    cluster.add_worker(store="tcp://10.0.0.1:1")
    cluster.add_worker(store="tcp://10.0.0.9:1")  # a store not (yet) registered: no row
    cluster.send(busy.identity, m.Heartbeat(bytes_held=300 << 20, bytes_spilled=100 << 20, bytes_pinned=50 << 20,
                                            object_count=7))
    cluster.core.counters["bytes_relayed"] += 12345
    status = cluster.core.status(cluster.now + 2.0)
    snapshot = decode_snapshot(encode_snapshot(MonitorSnapshot(stores=status.stores,
                                                               bytes_relayed=status.bytes_relayed)))

    assert snapshot.stores == [
        StoreStatus(name=busy.identity.decode(), data_address="tcp://10.0.0.1:1", capacity_bytes=1 << 30,
                    bytes_held=300 << 20, bytes_spilled=100 << 20, bytes_pinned=50 << 20, objects=7, workers=2,
                    seconds_since_heard=2.0),
        StoreStatus(name=quiet.identity.decode(), data_address="tcp://10.0.0.2:1", capacity_bytes=500,
                    seconds_since_heard=2.0),
    ]
    assert snapshot.stores[0].bytes_in_memory == 200 << 20
    assert snapshot.bytes_relayed == 12345
    assert decode_snapshot(encode_snapshot(MonitorSnapshot())).stores == []


def test_itl_flags_restate_the_snapshot() -> None:
    snapshot = decode_snapshot(encode_snapshot(status_of_busy_cluster()))
    heartbeat_sender = next(w for w in snapshot.workers if w.processor_rss_bytes > 0)
    assert heartbeat_sender.processor_initialized
    assert heartbeat_sender.has_task == (heartbeat_sender.assigned > 0)
    assert not heartbeat_sender.task_locked
    never_heard = next(w for w in snapshot.workers if w.processor_rss_bytes == 0)
    assert not never_heard.processor_initialized
    assert never_heard.flags == "0" + ("1" if never_heard.assigned else "0") + "0"


def test_negative_or_fractional_counts_do_not_break_encoding() -> None:
    status = status_of_busy_cluster()
    status.tasks.running = -1
    status.workers[0].seconds_since_heard = -0.5
    snapshot = decode_snapshot(encode_snapshot(status))
    assert snapshot.tasks.running == 0
    assert snapshot.workers[0].seconds_since_heard == 0.0


def test_an_empty_scheduler_encodes() -> None:
    snapshot = decode_snapshot(encode_snapshot(snapshot_of(SimulatedCluster().core.status(0.0))))
    assert snapshot.workers == [] and snapshot.clients == [] and snapshot.tasks.finished == 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_garbage_frames_raise_only_monitor_decode_error(frame: bytes) -> None:
    try:
        decode_snapshot(frame)
    except MonitorDecodeError:
        pass


def test_a_task_protocol_frame_is_not_mistaken_for_a_snapshot_with_workers() -> None:
    # A subscriber pointed at the wrong address must not crash: whatever decodes is harmless data.
    frame = bytes(m.encode(m.Hello(role=m.Role.CLIENT, name="x"))[0])
    try:
        snapshot = decode_snapshot(frame)
    except MonitorDecodeError:
        return
    assert isinstance(snapshot.workers, list)


# ---------------------------------------------------------------------------------------------- sockets


@pytest.fixture
def ipc_address(tmp_path) -> str:
    return f"ipc://{tmp_path}/monitor"


def receive_within(
    subscriber: MonitorSubscriber, publisher: MonitorPublisher, status: MonitorSnapshot, seconds: float = 10.0
) -> MonitorSnapshot:
    """PUB/SUB drops what is sent before the subscription lands, so publish until one arrives."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        publisher.publish(status)
        snapshot = subscriber.receive(0.1)
        if snapshot is not None:
            return snapshot
    raise AssertionError("no snapshot arrived")


def test_publisher_to_subscriber(ipc_address: str) -> None:
    import zmq

    context = zmq.Context()
    publisher = MonitorPublisher(context, ipc_address)
    try:
        assert publisher.is_bound
        with MonitorSubscriber(ipc_address) as subscriber:
            assert subscriber.seconds_since_last() is None
            status = status_of_busy_cluster()
            first = receive_within(subscriber, publisher, status)
            second = receive_within(subscriber, publisher, status)
            assert second.sequence > first.sequence
            assert len(second.workers) == 2
            assert subscriber.seconds_since_last() is not None
    finally:
        publisher.close()
        context.term()
    assert not os.path.exists(ipc_address[len("ipc://"):]), "the ipc socket file is left behind"


def test_close_is_idempotent_and_publish_after_close_is_a_no_op(ipc_address: str) -> None:
    import zmq

    context = zmq.Context()
    publisher = MonitorPublisher(context, ipc_address)
    publisher.close()
    publisher.close()
    publisher.publish(status_of_busy_cluster())
    context.term()


def test_an_address_that_cannot_be_bound_turns_the_feed_off(tmp_path, caplog) -> None:
    import zmq

    context = zmq.Context()
    caplog.set_level(logging.ERROR)
    publisher = MonitorPublisher(context, f"ipc://{tmp_path}/no/such/folder/monitor")
    try:
        assert not publisher.is_bound
        publisher.publish(status_of_busy_cluster())  # no error into the scheduler loop
        assert "monitor feed is off" in caplog.text and "--monitor-address" in caplog.text
    finally:
        publisher.close()
        context.term()


def test_a_bad_snapshot_is_logged_once_and_skipped(ipc_address: str, caplog) -> None:
    import zmq

    context = zmq.Context()
    publisher = MonitorPublisher(context, ipc_address)
    caplog.set_level(logging.ERROR)
    try:
        unencodable = MonitorSnapshot(workers=[WorkerStatus(name="w", capacity=1 << 40)])  # capacity is UInt32
        publisher.publish(unencodable)
        publisher.publish(unencodable)
        assert caplog.text.count("could not encode a monitor snapshot") == 1
    finally:
        publisher.close()
        context.term()


def test_receive_returns_none_when_nothing_arrives(ipc_address: str) -> None:
    # Returning at all is the point: the module's timeout fails a receive that hangs.
    with MonitorSubscriber(ipc_address) as subscriber:
        assert subscriber.receive(0.2) is None
        assert subscriber.receive(0) is None


def test_subscriber_skips_frames_that_are_not_snapshots(ipc_address: str) -> None:
    import zmq

    context = zmq.Context()
    socket = context.socket(zmq.PUB)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(ipc_address)
    try:
        with MonitorSubscriber(ipc_address) as subscriber:
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                socket.send(b"\x00\x00\x00\x00\xff\xff\xff\x7f garbage")
                assert subscriber.receive(0.05) is None
    finally:
        socket.close()
        context.term()


def test_the_draining_flag_round_trips_through_the_feed() -> None:
    snapshot = MonitorSnapshot(workers=[WorkerStatus(name="kept"), WorkerStatus(name="leaving", draining=True)])
    decoded = decode_snapshot(encode_snapshot(snapshot))
    assert [(worker.name, worker.draining) for worker in decoded.workers] == [("kept", False), ("leaving", True)]


def _every_field_set(row_type: type, **lists) -> object:
    """A row whose every scalar field holds a value unlike its default and unlike its neighbours'."""
    values: dict[str, object] = {}
    for index, field in enumerate(dataclasses.fields(row_type), start=1):
        if field.name in lists:
            values[field.name] = lists[field.name]
        elif field.type == "str":
            values[field.name] = f"{field.name}-{index}"
        elif field.type == "bool":
            values[field.name] = True
        elif field.type == "float":
            values[field.name] = index + 0.5
        else:
            values[field.name] = index * 11
    return row_type(**values)


def test_every_field_of_every_row_round_trips_through_the_feed() -> None:
    snapshot = MonitorSnapshot(
        tasks=_every_field_set(TaskCounts),
        clients=[_every_field_set(ClientStatus)],
        workers=[_every_field_set(WorkerStatus, tags=["gpu", "python"])],
        stores=[_every_field_set(StoreStatus)],
    )
    assert decode_snapshot(encode_snapshot(snapshot)) == snapshot


def test_a_worker_drained_in_the_core_shows_draining_through_the_feed_on_scaler_top() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    cluster.add_worker(capacity=4)
    cluster.add_worker(capacity=4)
    cluster.send(client.identity, m.DrainWorkers(worker_names=["worker-0"]))
    decoded = decode_snapshot(encode_snapshot(snapshot_of(cluster.core.status(cluster.now))))
    assert sorted((worker.name, worker.draining) for worker in decoded.workers) == [
        ("worker-0", True), ("worker-1", False),
    ]
    rows = [line for line in render(decoded, "worker", "ipc:///monitor", 0.0).lines if line.startswith("worker-")]
    assert [row.split()[0] for row in rows if "draining" in row] == ["worker-0"]


def test_feeds_of_a_scheduler_and_its_standby_show_the_serving_ones_and_follow_a_takeover(tmp_path) -> None:
    """Listed first, the standby's feed is passed over while it stands by; once the serving one falls silent and
    the standby serves, its feed is shown."""
    from scaler.protocol.monitor_feed import MonitorFeeds

    context = zmq.Context()
    standby_address, first_address = f"ipc://{tmp_path}/standby", f"ipc://{tmp_path}/first"
    standby, first = MonitorPublisher(context, standby_address), MonitorPublisher(context, first_address)
    standing_by, serving = MonitorSnapshot(standing_by=True), MonitorSnapshot(object_count=7)
    try:
        with MonitorFeeds(f"{standby_address},{first_address}", fresh_seconds=0.5) as feeds:
            shown = None
            deadline = time.monotonic() + 10
            while shown is None or shown.object_count != 7:
                assert time.monotonic() < deadline, "never showed the serving scheduler's feed"
                standby.publish(standing_by)
                first.publish(serving)
                shown = feeds.receive(0.05)
            for _ in range(20):  # from then on, the first one's only (before, the standby's was all there was)
                standby.publish(standing_by)
                first.publish(serving)
                shown = feeds.receive(0.05)
                assert shown is None or shown.object_count == 7, "showed the standby's feed while the first served"
            assert feeds.address == first_address
            took_over = MonitorSnapshot(object_count=9)
            while shown is None or shown.object_count != 9:  # the first is gone: only the standby publishes
                assert time.monotonic() < deadline, "never followed the standby once it served"
                standby.publish(took_over)
                shown = feeds.receive(0.05)
            assert feeds.address == standby_address
    finally:
        standby.close()
        first.close()
        context.term()
