"""Transparent huge pages for the large buffers a processor allocates.

A task that receives a 50 MB `bytes` argument gets it copied into fresh memory (a `bytes` object must own
its memory), and NumPy allocates every result array fresh. glibc serves allocations that large with
their own mmap, which the kernel fills one 4 KiB page fault at a time: on this project's machines that
costs more than the copy itself (50 MB: about 30 ms of faults against 7 ms of copying). glibc 2.35 and
later can ask for transparent huge pages for those mappings (`glibc.malloc.hugetlb=1`, a tunable read at
start-up, so it goes in the processor's environment); older glibc versions and other C libraries ignore
it, and where the kernel's THP setting is `never` nothing changes.
"""

from __future__ import annotations

from typing import Mapping

_TUNABLES = "GLIBC_TUNABLES"
_HUGE_PAGES = "glibc.malloc.hugetlb=1"


def with_large_pages(environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` with malloc's huge-page tunable added, unless the user set that tunable already."""
    result = dict(environment)
    tunables = result.get(_TUNABLES, "")
    if "glibc.malloc.hugetlb" in tunables:
        return result
    result[_TUNABLES] = f"{tunables}:{_HUGE_PAGES}" if tunables else _HUGE_PAGES
    return result
