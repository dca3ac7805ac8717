"""Fuzzing the fair share and priorities of the scheduler core's ready queues (ready_queue.py, client_lane.py).

A hypothesis state machine plays several clients with different shares, submitting tasks of several
priorities, nesting depths and tags; workers with and without tags that answer, give tasks back, leave;
cancels, departures, time passing (balancing). The simulated cluster checks the core's invariants after
every message (lanes, turns and per-client counters and summaries agree with a scan). After every step:

- **no client waits beyond its share**: a client whose lane (tag set, depth) had ready tasks all through
  the step is passed over by at most sum over the others of ceil(share_j / share_i) + 1 tasks of that
  lane's queue and depth, counted across steps until it is served;
- **deeper first**: no task was sent while a deeper task of the same queue stayed queued;
- **priorities**: no task was sent while a task of the same lane with a higher priority stayed queued;

and at the end every task has exactly one outcome and nothing is left in the core.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable

import pytest
from core_harness import SimClient, SimulatedCluster, SimWorker, assert_no_task_state
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from test_core_fair_share import submit

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig

pytestmark = pytest.mark.timeout(120)

CONFIG = CoreConfig(
    client_timeout_seconds=1e9, worker_timeout_seconds=1e9, load_balance_seconds=1.0, load_balance_trigger_times=1,
)
# (tags, client identity, depth): one lane of one queue.
Lane = tuple[tuple[str, ...], bytes, int]


class LoggingCluster(SimulatedCluster):
    """Notes every task sent to a worker, in the order sent, with the lane and priority it came from."""

    def __init__(self) -> None:
        super().__init__(CONFIG)
        self.sent: list[tuple[Lane, int, int]] = []

    def _to_worker(self, worker: SimWorker, message: m.Message) -> None:
        if isinstance(message, m.TaskSubmission):
            records = self.core.tasks.records
            for group in message.groups:
                for task_id in group.task_ids:
                    record = records[task_id]
                    lane = (record.signature.required_tags, record.client.identity, record.signature.nesting_depth)
                    self.sent.append((lane, record.priority, task_id))
        super()._to_worker(worker, message)


def ready_lanes(cluster: SimulatedCluster) -> dict[Lane, list[int]]:
    """The priorities of the queued tasks of each lane."""
    lanes: dict[Lane, list[int]] = collections.defaultdict(list)
    for record in cluster.core.tasks.queued_records():
        lane = (record.signature.required_tags, record.client.identity, record.signature.nesting_depth)
        lanes[lane].append(record.priority)
    return lanes


class FairShareFuzz(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cluster = LoggingCluster()
        self.clients: list[SimClient] = []
        self.shares: dict[bytes, float] = {}
        self.submitted: dict[bytes, set[int]] = {}
        self.made = 0
        # How many tasks of its queue and depth went to others since each backlogged lane was last served.
        self.passed_over: collections.Counter[Lane] = collections.Counter()
        self.ready_before: dict[Lane, list[int]] = {}

    def step(self, action: Callable[[], object]) -> None:
        self.ready_before = ready_lanes(self.cluster)
        sent_before = len(self.cluster.sent)
        action()
        self.check_step(self.cluster.sent[sent_before:])

    def check_step(self, sent: list[tuple[Lane, int, int]]) -> None:
        after = ready_lanes(self.cluster)
        for (tags, identity, depth), priority, task_id in sent:
            for (other_tags, other_identity, other_depth), priorities in after.items():
                if other_tags != tags:
                    continue
                assert other_depth <= depth, f"task {task_id:#x} of depth {depth} went before one of {other_depth}"
                if (other_identity, other_depth) == (identity, depth):
                    assert max(priorities) <= priority, f"task {task_id:#x} of priority {priority} went before " \
                        f"one of {max(priorities)}"
        backlogged = [lane for lane in after if lane in self.ready_before]
        for lane in list(self.passed_over):
            if lane not in backlogged:
                del self.passed_over[lane]
        for served, _, _ in sent:
            self.passed_over.pop(served, None)
            for lane in backlogged:
                if lane[0] != served[0] or lane[2] != served[2] or lane == served:
                    continue
                self.passed_over[lane] += 1
                bound = sum(
                    math.ceil(share / self.shares[lane[1]]) + 1
                    for identity, share in self.shares.items() if identity != lane[1]
                )
                assert self.passed_over[lane] <= bound, (
                    f"{lane} waited while {self.passed_over[lane]} tasks went to others (bound {bound})"
                )

    # ------------------------------------------------------------------------------------------ rules

    @initialize()
    def start(self) -> None:
        self.add_client(1.0)
        self.add_client(2.0)

    @precondition(lambda self: len(self.clients) < 4)
    @rule(share=st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.0]))
    def add_client(self, share: float) -> None:
        identity = b"client-%d" % self.made
        self.made += 1
        client = self.cluster.add_client(identity)
        self.cluster.core.peers.clients[identity].share = share
        self.clients.append(client)
        self.shares[identity] = share
        self.submitted[identity] = set()

    @precondition(lambda self: len(self.cluster.workers) < 3)
    @rule(capacity=st.integers(1, 4), gpu=st.booleans())
    def add_worker(self, capacity: int, gpu: bool) -> None:
        self.step(lambda: self.cluster.add_worker(
            capacity=capacity, identity=b"worker-%d" % self.made, tags=["gpu"] if gpu else []
        ))
        self.made += 1

    @rule(
        data=st.data(), count=st.integers(1, 8), priority=st.sampled_from([0, 0, 0, 1, 5, -2]),
        depth=st.sampled_from([0, 0, 0, 1, 2]), gpu=st.booleans(),
    )
    def submit(self, data: st.DataObject, count: int, priority: int, depth: int, gpu: bool) -> None:
        client = data.draw(st.sampled_from(self.clients))
        tags = ("gpu",) if gpu else ()
        self.step(lambda: self.submitted[client.identity].update(
            submit(self.cluster, client, count, priority=priority, depth=depth, tags=tags)
        ))

    @precondition(lambda self: any(worker.pending for worker in self.cluster.workers.values()))
    @rule(data=st.data(), give_back=st.booleans())
    def worker_answers(self, data: st.DataObject, give_back: bool) -> None:
        worker = data.draw(st.sampled_from([w for w in self.cluster.workers.values() if w.pending]))
        count = data.draw(st.integers(1, len(worker.pending)))
        kind = m.FailureKind.RETURNED if give_back else None
        self.step(lambda: self.cluster.complete(worker, count, failure_kind=kind))

    @precondition(lambda self: self.cluster.workers)
    @rule(data=st.data())
    def worker_leaves(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from(list(self.cluster.workers.values())))
        self.step(lambda: self.cluster.send(worker.identity, m.Disconnect(reason="bye")))
        self.cluster.forget_worker(worker)

    @precondition(lambda self: any(self.open_tasks(client) for client in self.clients))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from([c for c in self.clients if self.open_tasks(c)]))
        chosen = data.draw(st.lists(st.sampled_from(self.open_tasks(client)), min_size=1, max_size=4, unique=True))
        self.step(lambda: self.cluster.cancel(client, chosen))

    @precondition(lambda self: len(self.clients) > 1)
    @rule(data=st.data())
    def client_leaves(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(self.clients))
        self.step(lambda: self.cluster.send(client.identity, m.Disconnect(reason="done")))
        self.clients.remove(client)
        del self.shares[client.identity], self.submitted[client.identity]
        del self.cluster.clients[client.identity]

    @rule(advance=st.sampled_from([0.5, 2.0]))
    def time_passes(self, advance: float) -> None:
        self.step(lambda: self.cluster.tick(advance))
        for worker in self.cluster.workers.values():
            released = [
                task_id for message in worker.received(m.ReleaseTasks) for task_id in message.task_ids
                if task_id in worker.pending
            ]
            worker.inbox = [message for message in worker.inbox if not isinstance(message, m.ReleaseTasks)]
            if released:
                self.step(lambda worker=worker, released=released: self.cluster.complete(
                    worker, task_ids=list(dict.fromkeys(released)), failure_kind=m.FailureKind.RETURNED
                ))

    def open_tasks(self, client: SimClient) -> list[int]:
        return sorted(task_id for task_id in self.submitted[client.identity] if not client.outcomes.get(task_id))

    @invariant()
    def each_task_has_at_most_one_outcome(self) -> None:
        for client in self.clients:
            assert all(len(outcomes) == 1 for outcomes in client.outcomes.values())

    def teardown(self) -> None:
        cluster = self.cluster
        cluster.add_worker(capacity=4, identity=b"last-worker", tags=["gpu"])
        cluster.run_to_completion(batch=3)
        for client in self.clients:
            assert not self.open_tasks(client), f"{client.identity!r} has tasks without an outcome"
        assert_no_task_state(cluster.core)


FairShareFuzz.TestCase.settings = settings(
    database=None, derandomize=True, deadline=None, max_examples=120, stateful_step_count=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_fair_share_under_fuzzed_clients = FairShareFuzz.TestCase
