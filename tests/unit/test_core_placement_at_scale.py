"""Placement with hundreds of simulated workers: few, large batches for busy workers, and no scan of full ones.

At hundreds of workers the scheduler's cost per task is its cost per message: a chunk of a map water-filled
over 500 workers that already hold tasks is 500 messages of 2 tasks (and 500 results messages back). And
once every worker is full, a results message from one of them must not cost a look at all the others.
"""

from __future__ import annotations

import pytest

from scaler.protocol import messages as m
from scaler.scheduler.core.peer_registry import WorkerPeer
from scaler.scheduler.core.placement import TOP_UP_BATCH, served_count, water_fill
from tests.unit.core_harness import SimClient, SimulatedCluster, SimWorker

CHUNK = 1000


def _batches(worker: SimWorker) -> list[int]:
    return [sum(len(group.task_ids) for group in message.groups) for message in worker.submissions()]


def test_workers_that_hold_tasks_are_topped_up_in_batches_at_least_as_large_as_what_they_hold() -> None:
    cluster = SimulatedCluster(check_invariants=False)
    client = cluster.add_client()
    workers = [cluster.add_worker(capacity=1000) for _ in range(100)]
    for _ in range(5):  # a map's chunks, arriving faster than the workers answer
        cluster.submit(client, CHUNK)
    assert sum(len(worker.pending) for worker in workers) == 5 * CHUNK  # every task went out
    messages = sum(len(worker.submissions()) for worker in workers)
    assert messages < 400, f"{messages} submissions for 5 chunks (plain water filling: 500)"
    for worker in workers:
        held = 0
        for batch in _batches(worker):
            assert batch >= min(held, TOP_UP_BATCH), f"a worker holding {held} tasks was sent {batch}"
            held += batch
    loads = [len(worker.pending) for worker in workers]
    assert max(loads) <= 2 * min(loads) + 1, loads  # still about even


def test_idle_workers_still_share_a_small_map_evenly() -> None:
    """Long tasks must not pile up on a few workers while the others idle."""
    cluster = SimulatedCluster(check_invariants=False)
    client = cluster.add_client()
    workers = [cluster.add_worker(capacity=1000) for _ in range(500)]
    cluster.submit(client, CHUNK)
    assert [len(worker.pending) for worker in workers] == [2] * 500


def test_a_single_task_goes_out_at_once_when_every_worker_is_busy() -> None:
    cluster = SimulatedCluster()
    client = cluster.add_client()
    workers = [cluster.add_worker(capacity=100) for _ in range(10)]
    cluster.submit(client, 200)
    cluster.complete(workers[3], 5)
    [task_id] = cluster.submit(client, 1)
    assert task_id in workers[3].pending  # the least loaded


@pytest.mark.parametrize("count", [1, 7, 64, 1000])
def test_served_workers_share_every_task_their_room_allows(count: int) -> None:
    loads = sorted([0, 3, 3, 10, 50, 70, 200, 200])
    room = [1000 - load for load in loads]
    served = served_count(loads, room, count)
    assert 1 <= served <= len(loads)
    assert sum(water_fill(loads[:served], room[:served], count)) == count


def test_a_results_message_looks_only_at_its_worker_while_every_worker_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = SimulatedCluster(check_invariants=False)
    client = cluster.add_client()
    workers = [cluster.add_worker(capacity=5) for _ in range(200)]
    cluster.submit(client, 2000)  # 1,000 out, 1,000 queued: every worker is full
    assert cluster.core.unassigned_count == 1000
    reads = []
    original = WorkerPeer.free

    def counted(worker: WorkerPeer) -> int:
        reads.append(worker.identity)
        return original.fget(worker)  # type: ignore[attr-defined]

    monkeypatch.setattr(WorkerPeer, "free", property(counted))
    cluster.complete(workers[7], 3)
    assert len(workers[7].pending) == 5  # refilled at once
    assert set(reads) <= {workers[7].identity}, f"looked at {len(set(reads))} workers"
    cluster.submit(client, 10)  # more tasks for a full cluster: nothing to look at either
    assert set(reads) <= {workers[7].identity}, f"looked at {len(set(reads))} workers"


def test_slots_freed_without_results_are_filled_from_a_full_clusters_queue() -> None:
    """A clear frees slots on every worker at once: the queued tasks of another client go out."""
    cluster = SimulatedCluster()
    first, second = cluster.add_client(), cluster.add_client()
    workers = [cluster.add_worker(capacity=5) for _ in range(20)]
    cluster.submit(first, 100)
    waiting = cluster.submit(second, 50)
    assert not any(task_id in worker.pending for worker in workers for task_id in waiting)
    cluster.send(first.identity, m.ClearRequest())
    for worker in workers:  # the workers drop the cleared tasks as told
        for message in worker.inbox:
            if isinstance(message, m.CancelTasks):
                for task_id in message.task_ids:
                    worker.pending.pop(task_id, None)
    held = {task_id for worker in workers for task_id in worker.pending}
    assert set(waiting) <= held
    cluster.run_to_completion()
    assert sorted(second.successes()) == sorted(waiting)


def test_a_slot_freed_after_a_cancel_emptied_the_queue_takes_the_next_task_at_once() -> None:
    """The fuzzed core found it: dispatch marked the queue as held back by full workers, a cancel emptied it,
    the worker's slot freed while nothing waited, and a task submitted then waited beside that free slot."""
    cluster = SimulatedCluster()
    worker = cluster.add_worker(capacity=1)
    client = cluster.add_client()
    running, queued = cluster.submit(client, 2)
    assert worker.received_task_ids == [running]
    cluster.cancel(client, [queued])
    cluster.complete(worker)
    (later,) = cluster.submit(client, 1)
    assert worker.received_task_ids == [running, later]


def _measured(cluster: SimulatedCluster, client: SimClient, workers: list[SimWorker], task_seconds: float) -> None:
    """One task of the function on one worker, answered with its run time: the function's pace is known."""
    cluster.submit(client, 1)
    for worker in workers:
        if worker.pending:
            cluster.complete(worker, task_seconds=task_seconds)


def test_idle_workers_get_tiny_tasks_in_batches_once_their_function_is_measured() -> None:
    """A chunk of no-op tasks over 500 idle workers was 500 messages of 2 tasks (and 500 back): most of the
    scheduler's work at hundreds of workers. Known to take 2 µs each, they go out in a few large messages."""
    cluster = SimulatedCluster(check_invariants=False)
    client = cluster.add_client()
    workers = [cluster.add_worker(capacity=1000) for _ in range(500)]
    _measured(cluster, client, workers, 2e-6)
    for worker in workers:
        worker.inbox.clear()
    cluster.submit(client, CHUNK)
    batches = [batch for worker in workers for batch in _batches(worker)]
    assert sum(batches) == CHUNK
    assert len(batches) <= 4, f"{len(batches)} submissions for one chunk of tiny tasks"
    cluster.run_to_completion()
    assert len(client.successes()) == CHUNK + 1


def test_long_tasks_spread_over_idle_workers_though_another_function_was_tiny() -> None:
    """The pace is the function's: workers that ran no-op tasks still share a chunk of a new, unmeasured function
    evenly, and of a function measured as slow."""
    cluster = SimulatedCluster(check_invariants=False)
    client = cluster.add_client()
    workers = [cluster.add_worker(capacity=1000) for _ in range(500)]
    _measured(cluster, client, workers, 2e-6)
    cluster.run_to_completion()
    slow = b"cloudpickled function: time.sleep(10)"
    cluster.submit(client, CHUNK, function_payload=slow)
    assert [len(worker.pending) for worker in workers] == [2] * 500
    for worker in workers:  # measured now: 10 s each
        cluster.complete(worker, task_seconds=10.0)
    cluster.submit(client, CHUNK, function_payload=slow)
    assert [len(worker.pending) for worker in workers] == [2] * 500


def test_tiny_tasks_are_batched_only_onto_idle_workers_never_behind_a_running_task() -> None:
    """joblib's own test_parallel_unordered_generator_returns_fastest_first caught it: with every worker holding a
    task, a batch of tiny tasks went to the first of them, which ran a slow one, and waited for it there."""
    cluster = SimulatedCluster(check_invariants=False)
    client = cluster.add_client()
    workers = [cluster.add_worker(capacity=1000) for _ in range(3)]
    _measured(cluster, client, workers, 2e-6)
    [running] = cluster.submit(client, 1, function_payload=b"cloudpickled function: time.sleep(30)")
    [busy] = [worker for worker in workers if running in worker.pending]
    for worker in workers:
        worker.inbox.clear()
    cluster.submit(client, 50)
    assert not _batches(busy), "tiny tasks were queued behind the running one, with idle workers around"
    assert sorted(len(worker.pending) for worker in workers) == [0, 1, 50], "not one batch to an idle worker"


def test_a_slow_task_held_by_each_worker_keeps_tiny_tasks_spread() -> None:
    """With every worker holding one task (ties in the order of the loads), tiny tasks go out by water filling:
    a batch for the first of them would wait behind whatever it runs."""
    cluster = SimulatedCluster(check_invariants=False)
    client = cluster.add_client()
    workers = [cluster.add_worker(capacity=1000) for _ in range(3)]
    _measured(cluster, client, workers, 2e-6)
    for _ in workers:
        cluster.submit(client, 1, function_payload=b"cloudpickled function: time.sleep(30)")
    assert [len(worker.pending) for worker in workers] == [1, 1, 1]
    cluster.submit(client, 60)
    assert [len(worker.pending) for worker in workers] == [21, 21, 21]
