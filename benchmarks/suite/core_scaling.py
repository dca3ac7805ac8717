"""The scheduler's sans-I/O core, driven directly by simulated workers and one client.

No sockets or processes: what is timed is `SchedulerCore.on_message` alone, so the figures show the
scheduler's own cost per task and how it grows with the number of workers. The simulated client
submits tasks in chunks of 1,000 (as `Client.map` does); after each chunk every worker that holds
tasks answers all of them in one results message, as a worker does when its tasks finish together.

The memory check runs a million tasks through the core and then looks for anything left behind:
task records, queue entries, per-worker assignments, and the Python memory blocks still allocated
(sys.getallocatedblocks) after the first tenth of the tasks and after all of them.
"""

from __future__ import annotations

import gc
import os
import sys
import time

from workloads import Runner, current_rss_mb

from scaler.protocol import messages as m
from scaler.scheduler.core.core_config import CoreConfig
from scaler.scheduler.core.scheduler_core import SchedulerCore
from scaler.utility.identifiers import TASK_COUNTER_BITS, content_object_id

FUNCTION_PAYLOAD = b"a serialized no-op function"
FUNCTION_ID = content_object_id(FUNCTION_PAYLOAD)
CLIENT = b"client"
CHUNK = 1000
WORKER_CAPACITY = 1000  # the workers' default --per-worker-task-queue-size


class Simulation:
    def __init__(self, workers: int) -> None:
        self.core = SchedulerCore(CoreConfig())
        self.now = 1000.0
        self.core_seconds = 0.0
        self.messages = 0
        self.submissions_sent = 0
        self.completed = 0
        self.pending: dict[bytes, list[int]] = {}
        welcome = self.send(CLIENT, m.Hello(role=m.Role.CLIENT, name="bench"))
        self.prefix = next(message.id_prefix for _, message in welcome if isinstance(message, m.Welcome))
        self.counter = 0
        self.function_sent = False
        for index in range(workers):
            identity = b"worker-%d" % index
            self.pending[identity] = []
            self.send(identity, m.Hello(role=m.Role.WORKER, name=identity.decode(), capacity=WORKER_CAPACITY))

    def send(self, identity: bytes, message: m.Message) -> list:
        started = time.perf_counter()
        out = self.core.on_message(identity, message, self.now)
        self.core_seconds += time.perf_counter() - started
        self.messages += 1
        for target, reply in out:
            if isinstance(reply, m.TaskSubmission):
                self.submissions_sent += 1
                holder = self.pending[target]
                for group in reply.groups:
                    holder.extend(group.task_ids)
            elif isinstance(reply, m.TaskResults):
                self.completed += len(reply.succeeded_ids)
                if reply.failures:
                    raise AssertionError(f"the core failed tasks: {reply.failures[:3]}")
        return out

    def submit_chunk(self, count: int) -> None:
        first = self.counter
        self.counter += count
        task_ids = [(self.prefix << TASK_COUNTER_BITS) | (first + index) for index in range(count)]
        objects = []
        if not self.function_sent:
            objects = [m.ObjectPayload(object_id=FUNCTION_ID, payload=FUNCTION_PAYLOAD, name="noop")]
            self.function_sent = True
        group = m.TaskGroup(function_id=FUNCTION_ID, args_per_task=1, keywords=(), task_ids=task_ids,
                            args=[b"argument"] * count)
        self.send(CLIENT, m.TaskSubmission(objects=objects, groups=[group]))

    def answer_all(self) -> None:
        for identity, task_ids in self.pending.items():
            if task_ids:
                self.pending[identity] = []
                # As a real worker's: with how long its no-op tasks ran (prefetch sizes its queue by it).
                self.send(identity, m.TaskResults(succeeded_ids=task_ids, payloads=[b"result"] * len(task_ids),
                                                  failures=[], run_seconds=2e-6 * len(task_ids),
                                                  ran_tasks=len(task_ids)))

    def run(self, tasks: int, chunk_size: int = CHUNK, ahead: int = 1) -> None:
        """`ahead` chunks arrive before the workers answer (a real map's client sends its chunks faster than
        workers finish them); 1 is the default: every worker answers all it holds after each chunk."""
        target = self.completed + tasks
        submitted = 0
        while self.completed < target:
            for _ in range(ahead):
                if submitted < tasks:
                    chunk = min(chunk_size, tasks - submitted)
                    self.submit_chunk(chunk)
                    submitted += chunk
            self.answer_all()
            self.now += 0.001

    def leftovers(self) -> dict:
        core = self.core
        return {
            "task_records": len(core.tasks.records),
            "unassigned_queue_entries": core.tasks.queue_entries(),
            "dependency_entries": len(core.graph.dependents),
            "assigned_on_workers": sum(len(worker.assigned) for worker in core.workers()),
            "client_task_ids": sum(len(client.task_ids) for client in core.peers.clients.values()),
        }


def scaling_point(workers: int, tasks: int, tasks_per_worker_message: int = 0, ahead: int = 1) -> dict:
    """Cost per task with map-sized chunks (the default), or with chunks sized so that every results
    message carries `tasks_per_worker_message` tasks whatever the number of workers."""
    chunk = tasks_per_worker_message * workers if tasks_per_worker_message else CHUNK
    tasks = max(tasks, chunk)
    simulation = Simulation(workers)
    simulation.run(chunk, chunk)  # warm up
    simulation.core_seconds = 0.0
    simulation.messages = 0
    simulation.submissions_sent = 0
    started = time.perf_counter()
    simulation.run(tasks, chunk, ahead)
    wall = time.perf_counter() - started
    return {
        "workers": workers, "tasks": tasks, "chunk": chunk, "tasks_per_results_message": tasks / simulation.messages,
        "core_us_per_task": simulation.core_seconds / tasks * 1e6,
        "core_us_per_message": simulation.core_seconds / simulation.messages * 1e6,
        "messages": simulation.messages, "submissions_sent": simulation.submissions_sent,
        "simulation_seconds": wall, **simulation.leftovers(),
    }


def memory_check(workers: int, tasks: int) -> dict:
    """Python memory blocks and RSS after a warm-up, after the first tenth of the tasks, and after all."""
    chunk = 100 * workers
    simulation = Simulation(workers)
    simulation.run(chunk, chunk)  # warm up: every worker, the function object, tables at their working size
    checkpoints = []
    for tasks_now in (0, tasks // 10, tasks - tasks // 10):
        if tasks_now:
            simulation.run(tasks_now, chunk)
        gc.collect()
        checkpoints.append((sys.getallocatedblocks(), current_rss_mb([os.getpid()])))
    (blocks_before, rss_before), (blocks_tenth, rss_tenth), (blocks_after, rss_after) = checkpoints
    return {
        "workers": workers, "tasks": tasks, "completed": simulation.completed - chunk, **simulation.leftovers(),
        "allocated_blocks_before": blocks_before, "allocated_blocks_after_tenth": blocks_tenth,
        "allocated_blocks_after": blocks_after, "blocks_added_after_tenth": blocks_after - blocks_tenth,
        "rss_before_mb": rss_before, "rss_after_tenth_mb": rss_tenth, "rss_after_mb": rss_after,
    }


def main() -> None:
    runner = Runner("scaler core (simulated)")
    spec = runner.spec
    for workers in spec["core_workers"]:
        runner.run(
            f"core_scaling_{workers}", lambda workers=workers: scaling_point(workers, runner.count("core_scaling")),
            asked_as="core_scaling",
        )
    for workers in spec["core_workers"]:
        runner.run(
            f"core_scaling_batched_{workers}",
            lambda workers=workers: scaling_point(
                workers, runner.count("core_scaling_batched"), tasks_per_worker_message=100
            ),
            asked_as="core_scaling",
        )
    runner.run("core_memory", lambda: memory_check(spec["core_memory_workers"], runner.count("core_memory")))


if __name__ == "__main__":
    main()
