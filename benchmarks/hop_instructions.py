"""Instructions one round trip costs in the scheduler's and the agent's own code, and in the zmq calls.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/hop_instructions.py [--rounds 500]

Runs each part in a child process under valgrind's callgrind twice, with 20 and with 20 + `--rounds`
round trips, and prints the difference per round trip: a count that other work on the machine does not
change, unlike a clock (it takes a few minutes). The parts, with no process or socket between the hops:

- scheduler: decode a client's submission, the core's answer, encode it for the worker; the same for the
  worker's results and the message to the client;
- agent: the agent core forwarding one submission to a processor and its results (as a processor sends them) to
  the scheduler;
- zmq: the four messages of a round trip sent with zmq_util.send_frames and read with receive_frames,
  over inproc (no I/O thread), so only the Python and libzmq calls are counted.

Needs valgrind. Wake-ups and the kernel are not counted here: benchmarks/round_trip_hops.py shows those.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from typing import Callable

from scaler.protocol import messages as m

_FUNCTION_ID = b"f" * 16
_FIRST_TASK_ID = 1 << 32
_WARM_ROUNDS = 20


def _messages(index: int) -> tuple[list[m.Buffer], list[m.Buffer]]:
    """A one-task submission (the function with the first) and its results, encoded."""
    task_id = _FIRST_TASK_ID + index
    objects = [m.ObjectPayload(_FUNCTION_ID, b"function", "f")] if index == 0 else []
    group = m.TaskGroup(function_id=_FUNCTION_ID, args_per_task=1, keywords=(), task_ids=[task_id], args=[b"a" * 40])
    results = m.TaskResults(succeeded_ids=[task_id], payloads=[b"r" * 40], failures=[])
    return m.encode(m.TaskSubmission(objects=objects, groups=[group])), m.encode(results)


def _scheduler(count: int) -> Callable[[int], None]:
    from scaler.scheduler.core.core_config import CoreConfig
    from scaler.scheduler.core.scheduler_core import SchedulerCore

    core = SchedulerCore(CoreConfig())
    core.on_message(b"client", m.Hello(role=m.Role.CLIENT, name="client"), 1.0)
    core.on_message(b"worker", m.Hello(role=m.Role.WORKER, name="worker", capacity=1000, tags=("python",)), 1.0)
    encoded = [_messages(index) for index in range(count)]

    def round_trip(index: int) -> None:
        submission, results = encoded[index]
        for _, message in core.on_message(b"client", m.decode(submission), 1.0):
            m.encode(message)
        for _, message in core.on_message(b"worker", m.decode(results), 1.0):
            m.encode(message)

    return round_trip


def _agent(count: int) -> Callable[[int], None]:
    from scaler.worker.agent_core import WorkerAgentCore
    from scaler.worker.config import WorkerConfig

    class NoneRunning:
        def running_task_id(self, identity: bytes) -> int:
            return -1

    core = WorkerAgentCore(WorkerConfig(address="tcp://127.0.0.1:1"), "worker", "host", 1, NoneRunning())
    core.start(1.0)
    core.on_scheduler_frames(m.encode(m.Welcome()), 1.0)
    processor = next(iter(core.pool.processors))
    core.on_processor_frames(processor, m.encode(m.Hello(role=m.Role.WORKER)), 1.0)
    try:  # results as a processor sends them: their ids ahead (scaler/worker/result_ids.py)
        from scaler.worker.result_ids import ids_frame

        def as_sent(results: list[m.Buffer]) -> list[m.Buffer]:
            decoded = m.decode(results)
            assert isinstance(decoded, m.TaskResults)
            return [ids_frame(decoded), *results]
    except ImportError:  # a checkout from before it, for a comparison

        def as_sent(results: list[m.Buffer]) -> list[m.Buffer]:
            return results

    # A fixed set of messages, made before the count starts to differ, so that only the core's work is counted
    # (the first submission, with the function, is not repeated; a task id may be reused once answered).
    encoded = [(submission, as_sent(results)) for submission, results in map(_messages, range(_WARM_ROUNDS))]

    def round_trip(index: int) -> None:
        submission, results = encoded[1 + index % (_WARM_ROUNDS - 1)] if index else encoded[0]
        core.on_scheduler_frames(list(submission), 1.0)
        core.on_processor_frames(processor, list(results), 1.0)

    return round_trip


def _zmq(count: int) -> Callable[[int], None]:
    import zmq

    from scaler.utility.zmq_util import receive_frames, send_frames

    context = zmq.Context()
    dealer, router = context.socket(zmq.DEALER), context.socket(zmq.ROUTER)
    dealer.setsockopt(zmq.IDENTITY, b"dealer")
    router.bind("inproc://hop-instructions")
    dealer.connect("inproc://hop-instructions")
    send_frames(dealer, [b"hello"])
    receive_frames(router)
    control_frame = b"c" * 200

    def round_trip(index: int) -> None:
        for _ in range(2):
            send_frames(router, [b"dealer", control_frame])
            receive_frames(dealer)
            send_frames(dealer, [control_frame])
            receive_frames(router)

    return round_trip


_PARTS = {"scheduler": _scheduler, "agent": _agent, "zmq": _zmq}


def _child(part: str, rounds: int, prepared: int) -> None:
    # Both runs of a part prepare the same messages (`prepared`, the longer run's count), so that only the round
    # trips run differ between them: the encoding of the inputs is not counted as the part's work.
    round_trip = _PARTS[part](prepared)
    for index in range(rounds):
        round_trip(index)


def _instructions(part: str, rounds: int, prepared: int) -> int:
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, __file__, "--child", part, "--rounds", str(rounds), "--prepared", str(prepared),
    ]
    output = subprocess.run(
        command, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"}
    ).stderr
    found = re.search(r"Collected : (\d+)", output)
    if found is None:
        raise SystemExit(f"no instruction count from callgrind:\n{output[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=500, help="round trips counted (default 500)")
    parser.add_argument("--child", choices=sorted(_PARTS), help=argparse.SUPPRESS)
    parser.add_argument("--prepared", type=int, default=0, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        _child(arguments.child, arguments.rounds, max(arguments.prepared, arguments.rounds))
        return
    print(f"{'part':<10} {'instructions per round trip':>28}")
    for part in _PARTS:
        longer = _WARM_ROUNDS + arguments.rounds
        counted = _instructions(part, longer, longer) - _instructions(part, _WARM_ROUNDS, longer)
        print(f"{part:<10} {counted / arguments.rounds:>28,.0f}")


if __name__ == "__main__":
    main()
