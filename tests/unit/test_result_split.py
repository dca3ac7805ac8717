"""A processor's batch cut to the scheduler's size limits (result_split.py): what rides with the parts."""

from __future__ import annotations

from scaler.protocol import messages as m
from scaler.worker.result_split import SizeLimits, split_results


def test_the_run_time_of_a_batch_goes_with_its_first_part_once() -> None:
    # The scheduler sums the run time it reads (prefetch.py): on every part it would count it several times.
    results = m.TaskResults(
        succeeded_ids=[1, 2, 3], payloads=[b"a" * 600, b"b" * 600, b"c" * 600], failures=[],
        run_seconds=0.3, ran_tasks=3,
    )
    parts, too_large = split_results(results, SizeLimits(max_control_frame_bytes=1000))
    assert too_large == 0
    assert [part.succeeded_ids for part in parts] == [[1], [2], [3]]
    assert [(part.ran_tasks, part.run_seconds) for part in parts] == [(3, 0.3), (0, 0.0), (0, 0.0)]
