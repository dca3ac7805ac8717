"""malloc settings for the processes that handle large buffers: processors and stores.

A task that receives a 50 MB `bytes` argument gets it copied into fresh memory (a `bytes` object must own
its memory), and NumPy allocates every result array fresh. glibc serves allocations above 32 MB with their
own mmap, which the kernel fills one 4 KiB page fault at a time and frees at once: on this project's
machines that costs more than the copy itself (50 MB: about 30 ms of faults against 5 ms of copying).

- Huge pages (processors and stores): glibc 2.35 and later can ask for transparent huge pages for those
  mappings (`glibc.malloc.hugetlb=1`). With them the 50 MB copy took 10 ms.
- Freed memory kept for reuse (processors): allocations up to `KEPT_BYTES` come from the heap, and up to
  `KEPT_BYTES` of free memory at its top stay there, so the next task's 50 MB copy reuses pages
  already faulted in (5 ms). A processor that has been idle for a while gives them back
  (`give_back_freed_memory`, malloc_trim), so a processor does not sit on the memory of its largest task.

Tunables are read at start-up, so they go in the child's environment. Older glibc versions and other C
libraries ignore them, and where the kernel's THP setting is `never` huge pages change nothing.
"""

from __future__ import annotations

from typing import Callable, Mapping

_TUNABLES = "GLIBC_TUNABLES"
_HUGE_PAGES = "glibc.malloc.hugetlb"
_MMAP_THRESHOLD = "glibc.malloc.mmap_threshold"
_TRIM_THRESHOLD = "glibc.malloc.trim_threshold"
KEPT_BYTES = 256 * 2**20


def with_large_pages(environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` with malloc's huge-page tunable added, unless the user set it already."""
    return _with_tunables(environment, {_HUGE_PAGES: "1"})


def with_freed_memory_kept(environment: Mapping[str, str]) -> dict[str, str]:
    """`environment` with huge pages, and freed allocations up to `KEPT_BYTES` kept in the heap for reuse;
    a tunable the user set already is left as it is."""
    return _with_tunables(
        environment, {_HUGE_PAGES: "1", _MMAP_THRESHOLD: str(KEPT_BYTES), _TRIM_THRESHOLD: str(KEPT_BYTES)}
    )


def _with_tunables(environment: Mapping[str, str], wanted: dict[str, str]) -> dict[str, str]:
    result = dict(environment)
    tunables = [item for item in result.get(_TUNABLES, "").split(":") if item]
    present = {item.split("=", 1)[0] for item in tunables}
    tunables += [f"{name}={value}" for name, value in wanted.items() if name not in present]
    result[_TUNABLES] = ":".join(tunables)
    return result


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None for another C library."""
    import ctypes
    from ctypes.util import find_library

    try:
        libc = ctypes.CDLL(find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


# Looked up at the first give-back, not at import: find_library runs `ldconfig -p`, a child process that
# every processor's start would otherwise wait for.
_trim: Callable[[int], int] | None = None
_trim_looked_up = False


def give_back_freed_memory() -> bool:
    """Return the heap's free memory to the system (glibc); whether anything was given back."""
    global _trim, _trim_looked_up
    if not _trim_looked_up:
        _trim = _malloc_trim()
        _trim_looked_up = True
    return bool(_trim(0)) if _trim is not None else False
