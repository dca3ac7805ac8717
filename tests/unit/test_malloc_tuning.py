from scaler.utility.malloc_tuning import KEPT_BYTES, with_freed_memory_kept, with_large_pages


def tunables(environment: dict[str, str]) -> list[str]:
    return environment["GLIBC_TUNABLES"].split(":")


def test_huge_pages_are_added_to_an_environment_without_tunables() -> None:
    assert tunables(with_large_pages({"PATH": "/bin"})) == ["glibc.malloc.hugetlb=1"]


def test_a_processor_keeps_freed_memory_up_to_the_limit() -> None:
    assert tunables(with_freed_memory_kept({})) == [
        "glibc.malloc.hugetlb=1", f"glibc.malloc.mmap_threshold={KEPT_BYTES}",
        f"glibc.malloc.trim_threshold={KEPT_BYTES}",
    ]


def test_what_the_user_set_stays_and_the_rest_is_added() -> None:
    environment = {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0:glibc.malloc.arena_max=2"}
    assert tunables(with_freed_memory_kept(environment)) == [
        "glibc.malloc.trim_threshold=0", "glibc.malloc.arena_max=2", "glibc.malloc.hugetlb=1",
        f"glibc.malloc.mmap_threshold={KEPT_BYTES}",
    ]
    assert environment["GLIBC_TUNABLES"] == "glibc.malloc.trim_threshold=0:glibc.malloc.arena_max=2"  # a copy

