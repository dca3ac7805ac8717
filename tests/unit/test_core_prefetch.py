"""How deep each worker's queue is (prefetch.py): as deep as its measured pace needs, and no deeper.

Simulated workers answer their tasks the way a processor batches results: one message per task for tasks of
10 ms and more, one per 5 ms for shorter ones; the simulated clock stands for the time they take.
"""

from __future__ import annotations

import pytest

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.peer_registry import WorkerPeer
from scaler.scheduler.core.prefetch import (
    FIRST_DEPTH,
    NESTED_GRACE_SECONDS,
    SAMPLE_SECONDS,
    SAMPLE_TASKS,
    STALL_SECONDS,
    depth_for,
)
from tests.unit.core_harness import FUNCTION_ID, FUNCTION_PAYLOAD, SimClient, SimulatedCluster, SimWorker

BATCH_SECONDS = 0.005  # a processor sends its results at least this often while it has more queued


def prefetching(check_invariants: bool = True, **options: float) -> SimulatedCluster:
    # The invariants walk every task after every message: the tests of thousands of tasks check them at the end.
    options.setdefault("worker_queue_seconds", 0.05)  # the default, spelled out: the figures below depend on it
    return SimulatedCluster(
        CoreConfig(load_balance_seconds=0, **options), prefetch=True, check_invariants=check_invariants
    )


def peer(cluster: SimulatedCluster, worker: SimWorker) -> WorkerPeer:
    return cluster.core.peers.workers[worker.identity]


def run(cluster: SimulatedCluster, worker: SimWorker, task_seconds: float, seconds: float, concurrency: int = 1) -> int:
    """The worker runs its tasks for `seconds`, finishing one per `task_seconds` (each runs `concurrency` times that
    long, on as many threads at once), and says how long they ran; returns the most it held meanwhile."""
    most = len(worker.pending)
    per_message = max(1, round(BATCH_SECONDS / task_seconds))
    elapsed = 0.0
    while elapsed < seconds and worker.pending:
        finished = min(per_message, len(worker.pending))
        cluster.now += finished * task_seconds
        elapsed += finished * task_seconds
        cluster.complete(worker, limit=finished, task_seconds=task_seconds * concurrency)
        most = max(most, len(worker.pending))
    return most


def released(worker: SimWorker) -> list[int]:
    return [task_id for message in worker.received(m.ReleaseTasks) for task_id in message.task_ids]


def give_back(cluster: SimulatedCluster, worker: SimWorker, task_ids: list[int]) -> None:
    """The worker answers a release: the named tasks it has not started go back as `returned`."""
    unstarted = [task_id for task_id in task_ids if task_id in worker.pending]
    cluster.complete(worker, task_ids=unstarted, failure_kind=m.FailureKind.RETURNED)


def test_the_depth_is_the_running_task_plus_the_horizon_at_the_measured_pace() -> None:
    assert depth_for(0.0, 1000, 0.05) == FIRST_DEPTH  # not measured yet
    assert depth_for(0.010, 1000, 0.05) == 6
    assert depth_for(2.0, 1000, 0.05) == 2
    assert depth_for(25e-6, 1000, 0.05) == 1000  # no-op tasks: the whole capacity, as before
    assert depth_for(0.010, 3, 0.05) == 3


def test_a_worker_running_several_tasks_at_once_keeps_them_all_busy() -> None:
    # A native worker with 4 threads (or a Symphony worker of base concurrency 4) says so in its hello. Its
    # tasks of 0.5 s finish 4 per 0.5 s: a pace of 0.125 s per task. Without its concurrency the depth
    # would be 2 (one running, one queued), and two of its threads would idle.
    cluster = prefetching(check_invariants=False)
    worker = cluster.add_worker(capacity=1000, concurrency=4)
    single = cluster.add_worker(capacity=1000)
    cluster.submit(cluster.add_client(), 400)
    run(cluster, worker, 0.125, 3.0, concurrency=4)
    run(cluster, single, 0.5, 3.0)
    assert peer(cluster, worker).concurrency == 4
    assert peer(cluster, worker).depth == depth_for(0.125, 1000, 0.05, concurrency=4) == 5
    assert len(worker.pending) == 5, "its 4 threads busy, and one queued"
    assert peer(cluster, single).depth == 2
    cluster.core.check_invariants()


def test_a_worker_cannot_claim_more_concurrency_than_its_capacity() -> None:
    cluster = prefetching()
    worker = cluster.add_worker(capacity=3, concurrency=50)
    lazy = cluster.add_worker(capacity=3, concurrency=0)
    assert peer(cluster, worker).concurrency == 3
    assert peer(cluster, lazy).concurrency == 1, "0 (a worker that does not say) counts as one"


def test_a_flood_of_10ms_tasks_never_queues_deeper_than_its_pace_needs() -> None:
    cluster = prefetching(check_invariants=False)
    workers = [cluster.add_worker(capacity=1000) for _ in range(2)]
    client = cluster.add_client()
    cluster.submit(client, 4000)
    assert [len(worker.pending) for worker in workers] == [FIRST_DEPTH, FIRST_DEPTH], "a slow start, not 1000 each"
    most = max(run(cluster, worker, 0.010, 2.0) for worker in workers)
    assert most <= depth_for(0.010, 1000, 0.05) == 6
    assert [peer(cluster, worker).depth for worker in workers] == [6, 6]
    assert cluster.core.unassigned_count > 3000, "the rest waits in the scheduler, where its order is decided"
    cluster.core.check_invariants()


def test_no_op_tasks_still_get_the_whole_queue() -> None:
    cluster = prefetching(check_invariants=False)
    worker = cluster.add_worker(capacity=1000)
    client = cluster.add_client()
    cluster.submit(client, 20000)
    most = run(cluster, worker, 25e-6, 0.2)
    assert peer(cluster, worker).depth == 1000
    assert most == 1000
    cluster.core.check_invariants()


def test_after_no_op_tasks_a_new_functions_slow_tasks_are_held_only_as_deep_as_their_own_pace_needs() -> None:
    """test_worker_queue_depth once caught a worker holding 347 of a flood's 10 ms tasks: a worker's pace is that of
    the tasks it ran, and after no-op tasks it was allowed its whole capacity of a new function's tasks until two
    samples of those came back. The function's own pace (function_pace.py) bounds that: a function never measured is
    held as by a worker that just joined, and once measured as its pace needs."""
    cluster = prefetching(check_invariants=False)
    workers = [cluster.add_worker(capacity=1000) for _ in range(2)]
    client = cluster.add_client()
    cluster.submit(client, 4000)
    for worker in workers:
        run(cluster, worker, 25e-6, 1.0)
    assert [peer(cluster, worker).depth for worker in workers] == [1000, 1000]
    assert cluster.core.unassigned_count == 0
    cluster.submit(client, 700, function_payload=b"cloudpickled function: sleep_ms(10)")
    assert [len(worker.pending) for worker in workers] == [FIRST_DEPTH, FIRST_DEPTH], "not 350 each"
    most = max(run(cluster, worker, 0.010, 0.5) for worker in workers)
    assert most <= depth_for(0.010, 1000, 0.05) == 6
    cluster.core.check_invariants()


def test_the_option_at_zero_fills_every_worker_up_to_its_capacity() -> None:
    cluster = prefetching(check_invariants=False, worker_queue_seconds=0.0)
    worker = cluster.add_worker(capacity=1000)
    cluster.submit(cluster.add_client(), 4000)
    assert len(worker.pending) == 1000
    run(cluster, worker, 0.010, 0.5)
    assert len(worker.pending) == 1000


def test_when_tiny_tasks_give_way_to_slow_ones_the_worker_gives_back_what_it_will_not_reach_soon() -> None:
    cluster = prefetching(check_invariants=False)
    worker = cluster.add_worker(capacity=1000)
    client = cluster.add_client()
    cluster.submit(client, 20000)
    run(cluster, worker, 25e-6, 0.2)
    assert len(worker.pending) == 1000
    # The tasks now take 10 ms: two samples show it, and the newest tasks beyond the new depth are asked back.
    elapsed = 0.0
    while not released(worker) and elapsed < 0.2:
        run(cluster, worker, 0.010, 0.010)
        elapsed += 0.010
    assert 2 * SAMPLE_SECONDS <= elapsed < 0.1, "not on one sample, which may be a pause, and soon after two"
    asked = released(worker)
    held = list(worker.pending)
    assert asked == held[6:], "the newest, which it has not started"
    give_back(cluster, worker, asked)
    assert len(worker.pending) == 6
    cluster.core.check_invariants()
    assert cluster.core.prefetch.taken_back == len(asked)


def test_a_worker_that_paused_once_keeps_its_queue() -> None:
    # On a loaded machine a worker may not run for a while: one slow sample, and then its pace is back.
    cluster = prefetching(check_invariants=False)
    worker = cluster.add_worker(capacity=1000)
    cluster.submit(cluster.add_client(), 20000)
    run(cluster, worker, 25e-6, 0.2)
    cluster.now += 0.3
    run(cluster, worker, 25e-6, 0.1)
    cluster.tick()
    assert not released(worker)
    assert peer(cluster, worker).depth == 1000, "back to its whole queue within 0.1 s"


def test_results_delivered_in_a_bunch_do_not_pass_for_fast_tasks() -> None:
    # A loaded machine holds a worker's results back, then delivers them one right after the other: the pace is
    # the tasks' running time the worker reports, not the time between its results.
    cluster = prefetching()
    worker = cluster.add_worker(capacity=1000)
    cluster.submit(cluster.add_client(), 500)
    run(cluster, worker, 0.010, 0.2)
    deepest = 0
    for _ in range(5):
        cluster.now += 0.050
        for _ in range(4):
            cluster.now += 0.0001
            cluster.complete(worker, limit=1, task_seconds=0.010)
            deepest = max(deepest, peer(cluster, worker).depth)
        run(cluster, worker, 0.010, 0.05)
        deepest = max(deepest, peer(cluster, worker).depth)
    assert deepest <= depth_for(0.010, 1000, 0.05), "never deeper than the steady pace allows"


def test_a_worker_waiting_for_a_cpu_keeps_the_queue_its_tasks_need() -> None:
    # 100 workers on 2 cores: each runs a few no-op tasks whenever it gets a CPU, its results far apart. Measured
    # from outside it looked slow, was given a few tasks per message, and the messages swamped the scheduler.
    cluster = prefetching(check_invariants=False)
    worker = cluster.add_worker(capacity=1000)
    cluster.submit(cluster.add_client(), 20000)
    for _ in range(40):
        cluster.now += 0.050  # waiting for its turn on a CPU
        cluster.complete(worker, limit=8, task_seconds=25e-6)
        cluster.tick()
    assert peer(cluster, worker).depth == 1000
    assert len(worker.pending) == 1000
    assert not released(worker)


def test_one_slow_task_among_tiny_ones_does_not_shrink_the_queue() -> None:
    cluster = prefetching(check_invariants=False)
    worker = cluster.add_worker(capacity=1000)
    cluster.submit(cluster.add_client(), 20000)
    run(cluster, worker, 25e-6, 0.1)
    cluster.now += 0.5
    cluster.complete(worker, limit=SAMPLE_TASKS, task_seconds=0.5 / SAMPLE_TASKS)  # a collection, a page fault
    run(cluster, worker, 25e-6, 0.05)
    assert peer(cluster, worker).depth == 1000
    assert not released(worker)


def test_a_worker_that_does_not_measure_its_tasks_holds_its_capacity() -> None:
    # A peer older than TaskResults.run_seconds: guessing its pace from outside is what collapsed on loaded
    # machines, so it is given what prefetch off gives, and it corrects that as soon as it reports.
    cluster = prefetching(check_invariants=False)
    worker = cluster.add_worker(capacity=1000)
    cluster.submit(cluster.add_client(), 20000)
    assert len(worker.pending) == FIRST_DEPTH
    cluster.now += 0.010
    cluster.complete(worker, limit=1)
    assert peer(cluster, worker).depth == 1000
    assert len(worker.pending) == 1000
    for _ in range(20):
        cluster.now += 0.5
        cluster.complete(worker, limit=1)
        cluster.tick()
    assert len(worker.pending) == 1000 and not released(worker), "no stall or take-back without a measured pace"


def test_a_worker_silent_on_a_long_task_keeps_one_task_queued_and_gives_back_the_rest() -> None:
    cluster = prefetching()
    worker = cluster.add_worker(capacity=1000)
    cluster.submit(cluster.add_client(), 100)
    run(cluster, worker, 0.010, 0.2)
    assert len(worker.pending) == 6
    cluster.tick(STALL_SECONDS / 2)
    assert not released(worker), "not silent for long yet"
    cluster.tick(STALL_SECONDS)
    assert released(worker) == list(worker.pending)[2:]
    assert peer(cluster, worker).depth == 2


def test_while_tasks_from_inside_tasks_are_unfinished_every_worker_may_hold_its_capacity() -> None:
    # A parent waiting on its children holds a slot and finishes nothing: small depths would deadlock a recursion.
    cluster = prefetching()
    worker = cluster.add_worker(capacity=1000)
    client = cluster.add_client()
    cluster.submit(client, 2000)
    run(cluster, worker, 0.010, 0.2)
    assert len(worker.pending) == 6
    inside = cluster.add_client()  # the client that tasks share on a worker
    children = submit_nested(cluster, inside, 100)
    assert len(worker.pending) == 1000
    assert set(children) <= set(worker.pending), "nested tasks go first"
    cluster.tick(NESTED_GRACE_SECONDS * 3)
    assert peer(cluster, worker).depth == 1000, "a parent may wait on the children still, silent as it is"
    assert not released(worker)
    cluster.now += 0.5
    cluster.complete(worker, task_ids=children)
    run(cluster, worker, 0.010, 0.3)
    cluster.tick()
    assert peer(cluster, worker).depth == 6
    assert released(worker), "what it holds beyond its depth again is given back"


def test_tasks_given_back_or_canceled_are_no_measure_of_the_pace() -> None:
    cluster = prefetching()
    worker = cluster.add_worker(capacity=1000)
    client = cluster.add_client()
    cluster.submit(client, 5000)
    run(cluster, worker, 0.010, 0.2)
    pace = peer(cluster, worker).pace.seconds_per_task
    cluster.now += 0.001
    cluster.complete(worker, limit=5, failure_kind=m.FailureKind.RETURNED)
    assert peer(cluster, worker).pace.seconds_per_task == pytest.approx(pace)


def test_a_worker_idle_before_its_tasks_came_is_not_measured_over_its_idle_time() -> None:
    cluster = prefetching()
    worker = cluster.add_worker(capacity=1000)
    client = cluster.add_client()
    cluster.submit(client, 4)
    run(cluster, worker, 25e-6, 0.1)
    assert not worker.pending
    cluster.now += 30.0  # the client thinks
    cluster.submit(client, 4)
    run(cluster, worker, 25e-6, 0.1)
    assert peer(cluster, worker).pace.seconds_per_task < 0.001


def submit_nested(cluster: SimulatedCluster, client: SimClient, count: int) -> list[int]:
    task_ids = client.next_task_ids(count)
    group = m.TaskGroup(
        function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids,
        args=[b"arg-%d" % task_id for task_id in task_ids], nesting_depth=1,
    )
    objects = [m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="f")]
    cluster.send(client.identity, m.TaskSubmission(objects=objects, groups=[group]))
    return task_ids


@pytest.mark.parametrize("run_seconds", [5e-324, float("nan"), float("inf"), -1.0])
def test_a_worker_reporting_nonsense_run_times_neither_crashes_the_core_nor_changes_its_depth(run_seconds) -> None:
    # Found by the core's fuzz: a pace of 5e-324 s made the horizon over the pace overflow to infinity, and the
    # results message raised OverflowError inside the core. NaN, infinite and negative times are no measure.
    cluster = prefetching()
    worker = cluster.add_worker(capacity=100)
    cluster.submit(cluster.add_client(), 500)
    depth_before = peer(cluster, worker).depth
    for _ in range(SAMPLE_TASKS + 1):
        message = m.TaskResults(
            succeeded_ids=[task_id := next(iter(worker.pending))], payloads=[b"r"], failures=[],
            ran_tasks=1, run_seconds=run_seconds,
        )
        worker.pending.pop(task_id)
        cluster.send(worker.identity, message)
    depth = peer(cluster, worker).depth
    assert 1 <= depth <= 100
    if run_seconds != 5e-324:
        assert depth == depth_before, "a time that is no time moved the depth"


def test_the_depth_for_a_vanishing_pace_is_the_capacity() -> None:
    assert depth_for(5e-324, capacity=7, horizon_seconds=0.05) == 7


def test_after_a_restart_a_worker_is_still_held_as_deep_as_its_tasks_pace_needs() -> None:
    """One path to test_worker_queue_depth's "a worker held 274 tasks of 10 ms": once any peer has said hello as after
    a restart, results are sifted for a grace period (rejoin.py), and the sifted message lost its run time. A worker
    whose first results came so counted as one that does not measure, and took its whole share of a flood (350)."""
    cluster = prefetching(check_invariants=False)
    back = cluster.add_worker(capacity=1000, rejoining=True)
    cluster.send(back.identity, m.Reannounce(task_ids=[]))
    workers = [back, cluster.add_worker(capacity=1000)]
    client = cluster.add_client()
    cluster.submit(client, 10)
    for worker in workers:
        run(cluster, worker, 25e-6, 0.01)
    cluster.submit(client, 700, function_payload=b"cloudpickled function: sleep_ms(10)")
    most = max(run(cluster, worker, 0.010, 0.5) for worker in workers)
    assert most <= depth_for(0.010, 1000, 0.05) == 6, "not its whole share"
    assert [peer(cluster, worker).pace.measured for worker in workers] == [True, True]
    cluster.core.check_invariants()


def test_a_worker_that_does_not_measure_is_held_to_the_pace_others_measured_of_a_function() -> None:
    # Its own pace is unknown, but the function's is not: a worker taken for one that does not measure (a results
    # message without its run time) must not take its whole share of a flood of 10 ms tasks for that.
    cluster = prefetching(check_invariants=False)
    silent, measuring = cluster.add_worker(capacity=1000), cluster.add_worker(capacity=1000)
    client = cluster.add_client()
    cluster.submit(client, 8)
    cluster.complete(silent, limit=1)  # no run time: it does not measure
    assert peer(cluster, silent).pace.measured is False
    cluster.complete(silent)
    cluster.complete(measuring, task_seconds=0.010)
    cluster.submit(client, 700)
    for _ in range(10):
        cluster.now += 0.010
        cluster.complete(silent, limit=1)
        cluster.complete(measuring, limit=1, task_seconds=0.010)
    assert len(silent.pending) <= depth_for(0.010, 1000, 0.05) == 6, "not its whole share"
    cluster.core.check_invariants()


def test_a_function_whose_tasks_all_raise_gets_a_pace_too() -> None:
    # A task that raised ran as long as it took: without that measure, the tasks of a function that always fails
    # stayed held as never measured, FIRST_DEPTH deep, however tiny they were.
    cluster = prefetching(check_invariants=False)
    worker = cluster.add_worker(capacity=1000)
    cluster.submit(cluster.add_client(), 20000, function_payload=b"cloudpickled function: always raises")
    assert len(worker.pending) == FIRST_DEPTH
    for _ in range(3):
        cluster.now += 0.001
        cluster.complete(worker, failure_kind=m.FailureKind.RAISED, task_seconds=25e-6)
    assert len(worker.pending) == 1000
    cluster.core.check_invariants()
