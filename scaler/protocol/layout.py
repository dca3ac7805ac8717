"""Arguments of a TaskGroup are flattened row by row; these helpers map flat indices back to tasks."""

from __future__ import annotations

from collections.abc import Sequence


def slots_by_row(flat_indices: Sequence[int], args_per_task: int) -> dict[int, list[int]]:
    """{task row: [argument slot within that task]} for the given flat argument indices."""
    by_row: dict[int, list[int]] = {}
    for flat_index in flat_indices:
        row, slot = divmod(flat_index, args_per_task)
        by_row.setdefault(row, []).append(slot)
    return by_row
