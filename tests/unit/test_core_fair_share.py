"""Free slots shared between clients, priorities within one, nested tasks first (ready_queue.py, client_lane.py).

The simulated cluster of core_harness.py drives the whole core; the invariants (lanes, turns, per-client
counters and summaries against a scan) are checked after every message.
"""

from __future__ import annotations

import dataclasses

import pytest
from core_harness import FUNCTION_ID, FUNCTION_PAYLOAD, SimClient, SimulatedCluster, SimWorker, assert_no_task_state

from scaler.protocol import messages as m
from scaler.scheduler.core.client_summary import ClientSummary

pytestmark = pytest.mark.timeout(60)


@dataclasses.dataclass(slots=True)
class PriorityGroup(m.TaskGroup):
    """A task group with the priority the api change puts on the wire (the core reads `group.priority`)."""

    priority: int = 0


def submit(
    cluster: SimulatedCluster, client: SimClient, count: int, *, priority: int = 0, depth: int = 0,
    tags: tuple[str, ...] = (),
) -> list[int]:
    task_ids = client.next_task_ids(count)
    objects = [] if FUNCTION_ID in client.sent_objects else [m.ObjectPayload(FUNCTION_ID, FUNCTION_PAYLOAD, "f")]
    client.sent_objects.add(FUNCTION_ID)
    group = PriorityGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids, args=[b"x"] * count,
        nesting_depth=depth, required_tags=tags, priority=priority,
    )
    cluster.send(client.identity, m.TaskSubmission(objects=objects, groups=[group]))
    return task_ids


def owners(cluster: SimulatedCluster, task_ids: list[int]) -> list[bytes]:
    """Which client each task id belongs to, by its prefix."""
    by_prefix = {client.prefix: client.identity for client in cluster.clients.values()}
    return [by_prefix[task_id >> 32] for task_id in task_ids]


def newly_sent(worker: SimWorker, since: int) -> list[int]:
    return worker.received_task_ids[since:]


def test_a_second_clients_first_task_goes_out_at_the_next_free_slot():
    """However much the first client has queued, one slot freeing is enough for the newcomer's task."""
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=2)
    flood, small = cluster.add_client(b"flood"), cluster.add_client(b"small")
    submit(cluster, flood, 1000)
    (lonely,) = submit(cluster, small, 1)
    assert lonely not in worker.pending
    sent = len(worker.received_task_ids)
    cluster.complete(worker, 1)
    assert newly_sent(worker, sent) == [lonely]


def test_equal_shares_alternate_and_leftovers_rotate():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1)
    alice, bob = cluster.add_client(b"alice"), cluster.add_client(b"bob")
    submit(cluster, alice, 50)
    submit(cluster, bob, 50)
    sent = len(worker.received_task_ids)
    for _ in range(20):
        cluster.complete(worker)
    order = owners(cluster, newly_sent(worker, sent))
    assert order.count(b"alice") == order.count(b"bob") == 10
    assert all(first != second for first, second in zip(order, order[1:])), order


@pytest.mark.parametrize("capacity", [1, 7, 30])
def test_a_share_of_two_gets_twice_the_slots(capacity):
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=capacity)
    single, double = cluster.add_client(b"single"), cluster.add_client(b"double")
    cluster.core.peers.clients[b"double"].share = 2.0
    submit(cluster, single, 1000)
    submit(cluster, double, 1000)
    sent = len(worker.received_task_ids)
    while len(worker.received_task_ids) - sent < 300:
        cluster.complete(worker)
    order = owners(cluster, newly_sent(worker, sent))[:300]
    assert abs(order.count(b"double") - 200) <= 2, order.count(b"double")
    # And within any stretch of the run, not only on average.
    window = order[90:150]
    assert abs(window.count(b"double") - 40) <= 2, window.count(b"double")


def test_a_client_with_fewer_ready_tasks_than_its_share_leaves_the_rest_to_others():
    cluster = SimulatedCluster()
    alice, bob = cluster.add_client(b"alice"), cluster.add_client(b"bob")
    cluster.core.peers.clients[b"bob"].share = 10.0
    submit(cluster, alice, 100)
    submit(cluster, bob, 3)
    worker = cluster.add_worker(capacity=20)
    assert owners(cluster, worker.received_task_ids).count(b"bob") == 3
    assert len(worker.received_task_ids) == 20


def test_priorities_order_one_clients_tasks_and_equal_ones_keep_submission_order():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1)
    client = cluster.add_client()
    (running,) = submit(cluster, client, 1)
    low = submit(cluster, client, 3)
    high = submit(cluster, client, 2, priority=5)
    middle = submit(cluster, client, 2, priority=1)
    negative = submit(cluster, client, 1, priority=-3)
    later_high = submit(cluster, client, 1, priority=5)
    cluster.run_to_completion(batch=1)
    assert worker.received_task_ids == [running, *high, *later_high, *middle, *low, *negative]
    assert_no_task_state(cluster.core)


def test_a_priority_does_not_jump_another_clients_turn():
    """Priorities order a client's own tasks; between clients the shares decide."""
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1)
    alice, bob = cluster.add_client(b"alice"), cluster.add_client(b"bob")
    submit(cluster, alice, 1)
    submit(cluster, alice, 10, priority=100)
    submit(cluster, bob, 10)
    sent = len(worker.received_task_ids)
    for _ in range(10):
        cluster.complete(worker)
    assert owners(cluster, newly_sent(worker, sent)).count(b"alice") == 5


def test_nested_tasks_go_before_every_shallower_task_whatever_its_priority_or_client():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1)
    parent_client = cluster.add_client(b"parent")
    inner_client = cluster.add_client(b"inner")  # the client inside a running task: another peer
    (running,) = submit(cluster, parent_client, 1)
    siblings = submit(cluster, parent_client, 3, priority=100)
    children = submit(cluster, inner_client, 2, depth=1)
    grandchildren = submit(cluster, inner_client, 2, depth=2)
    urgent_children = submit(cluster, inner_client, 1, depth=1, priority=9)
    cluster.run_to_completion(batch=1)
    assert worker.received_task_ids == [running, *grandchildren, *urgent_children, *children, *siblings]


def test_given_back_tasks_go_ahead_of_their_equals_but_not_of_higher_priorities():
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=2)
    client = cluster.add_client()
    first_two = submit(cluster, client, 2)
    waiting = submit(cluster, client, 2)
    assert sorted(worker.pending) == sorted(first_two)
    urgent = submit(cluster, client, 1, priority=3)
    cluster.complete(worker, task_ids=first_two, failure_kind=m.FailureKind.RETURNED)
    assert sorted(worker.pending) == sorted([urgent[0], first_two[0]])
    cluster.complete(worker, task_ids=urgent)
    assert first_two[1] in worker.pending
    cluster.run_to_completion(batch=1)
    assert worker.received_task_ids[-2:] == waiting
    assert_no_task_state(cluster.core)


def test_each_tag_sets_queue_is_shared_fairly_on_its_own():
    """Fair share holds within each tag set's queue; the queues themselves take turns (placement.py)."""
    cluster = SimulatedCluster()
    gpu = cluster.add_worker(capacity=1, tags=["gpu"])
    alice, bob = cluster.add_client(b"alice"), cluster.add_client(b"bob")
    alice_gpu = submit(cluster, alice, 20, tags=("gpu",))
    submit(cluster, alice, 20)  # any worker may run these, the gpu worker too
    bob_gpu = submit(cluster, bob, 20, tags=("gpu",))
    sent = len(gpu.received_task_ids)
    for _ in range(40):
        cluster.complete(gpu)
    gpu_sent = [task_id for task_id in newly_sent(gpu, sent) if task_id in alice_gpu or task_id in bob_gpu]
    assert len(gpu_sent) >= 18
    assert abs(owners(cluster, gpu_sent).count(b"bob") - len(gpu_sent) / 2) <= 1


def test_a_lane_emptied_by_cancels_starts_afresh():
    """A client whose queued tasks were all canceled, and who submits again, is a newcomer again."""
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1)
    alice, bob = cluster.add_client(b"alice"), cluster.add_client(b"bob")
    submit(cluster, alice, 100)
    canceled = submit(cluster, bob, 5)
    for _ in range(6):
        cluster.complete(worker)
    cluster.cancel(bob, [task_id for task_id in canceled if task_id not in worker.received_task_ids])
    for _ in range(20):
        cluster.complete(worker)
    (again,) = submit(cluster, bob, 1)
    sent = len(worker.received_task_ids)
    cluster.complete(worker)
    assert newly_sent(worker, sent) == [again]


def test_client_summary_counts_queued_running_and_the_oldest_wait():
    cluster = SimulatedCluster()
    client = cluster.add_client()
    other = cluster.add_client()
    core = cluster.core
    peer = core.peers.clients[client.identity]
    assert core.tasks.client_summary(peer, cluster.now) == ClientSummary(0, 0, 0.0)
    submit(cluster, client, 3)
    cluster.now += 2.0
    submit(cluster, client, 2)
    submit(cluster, other, 4)
    cluster.now += 1.5
    assert core.tasks.client_summary(peer, cluster.now) == ClientSummary(5, 0, 3.5)
    worker = cluster.add_worker(capacity=4)
    summary = core.tasks.client_summary(peer, cluster.now)
    assert (summary.queued, summary.running) == (3, 2)
    cluster.complete(worker)
    # The first two went and came back; of the next four slots the client had two (shares are equal).
    summary = core.tasks.client_summary(peer, cluster.now)
    assert (summary.queued, summary.running) == (1, 2)
    assert summary.oldest_ready_seconds == 1.5, "its task queued at the second submission waits"
    cluster.run_to_completion()
    assert core.tasks.client_summary(peer, cluster.now) == ClientSummary(0, 0, 0.0)


def test_a_client_that_leaves_takes_its_lanes_along():
    cluster = SimulatedCluster()
    stays, leaves = cluster.add_client(b"stays"), cluster.add_client(b"leaves")
    submit(cluster, stays, 3)
    submit(cluster, leaves, 3, depth=1)
    submit(cluster, leaves, 3, tags=("gpu",))
    cluster.send(leaves.identity, m.Disconnect(reason="done"))
    for queue in cluster.core.tasks.queues.values():
        assert all(client.identity == b"stays" for client, _ in queue.lanes)
        assert all(turn[3].client.identity == b"stays" for turn in queue.turns)
    worker = cluster.add_worker(capacity=5)
    assert len(worker.pending) == 3


def sent_ahead(worker: SimWorker) -> tuple[list[int], list[int]]:
    """The task ids this worker was sent ahead of what it held (TaskGroup.ahead), and the others."""
    ahead: list[int] = []
    behind: list[int] = []
    for submission in worker.submissions():
        for group in submission.groups:
            (ahead if group.ahead else behind).extend(group.task_ids)
    return ahead, behind


def test_a_newcomers_tasks_go_ahead_of_the_deep_queues_other_clients_hold_on_the_workers() -> None:
    # No-op floods keep each worker's queue 1,000 deep (prefetch.py): a newcomer's task placed behind them waited
    # for all of them. The worker runs tasks sent ahead first; a client far below its share of the tasks on
    # workers gets that, a client at its share never.
    cluster = SimulatedCluster()
    workers = [cluster.add_worker(capacity=1000) for _ in range(2)]
    flooder, newcomer = cluster.add_client(), cluster.add_client()
    submit(cluster, flooder, 5000)
    assert [sent_ahead(worker)[0] for worker in workers] == [[], []], "a client alone: nothing ahead"
    probe = submit(cluster, newcomer, 1)
    cluster.complete(workers[0], limit=10)
    assert sent_ahead(workers[0])[0] == probe, "its next free slot, ahead of the 990 it holds"
    assert len(sent_ahead(workers[0])[1]) == 1000 + 9, "the flooder's tasks keep their place"
    batch = submit(cluster, newcomer, 20)  # one task running already: far below its share still
    for _ in range(10):
        for worker in workers:
            cluster.complete(worker, limit=4)
    ahead = [task_id for worker in workers for task_id in sent_ahead(worker)[0]]
    assert sorted(ahead) == sorted(probe + batch), "all of it, over many rounds, and nothing of the flooder's"
    cluster.run_to_completion()
    assert_no_task_state(cluster.core)


def test_clients_at_their_share_of_the_workers_do_not_go_ahead() -> None:
    cluster = SimulatedCluster()
    workers = [cluster.add_worker(capacity=1000) for _ in range(2)]
    first, second = cluster.add_client(), cluster.add_client()
    submit(cluster, first, 5000)
    submit(cluster, second, 5000)
    for _ in range(40):
        for worker in workers:
            cluster.complete(worker, limit=100)
    held_ahead = [len(sent_ahead(worker)[0]) for worker in workers]
    for _ in range(10):
        for worker in workers:
            cluster.complete(worker, limit=100)
    assert [len(sent_ahead(worker)[0]) for worker in workers] == held_ahead, "no more once both hold their share"
    assert 0 < sum(held_ahead) <= 1000, "the second went ahead only until it held half its share"


def test_a_newcomers_tasks_on_an_idle_worker_are_not_marked_ahead() -> None:
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1000)
    first, second = cluster.add_client(), cluster.add_client()
    submit(cluster, first, 3)
    assert sent_ahead(worker)[0] == []
    behind_the_first = submit(cluster, second, 3)
    assert sent_ahead(worker)[0] == behind_the_first
    cluster.run_to_completion()
    submit(cluster, second, 2)
    assert not worker.submissions()[-1].groups[0].ahead, "nothing held there: nothing to go ahead of"
