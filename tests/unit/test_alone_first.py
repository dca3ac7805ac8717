"""The xdist scheduler of `--dist loadfile` (tests/alone_first.py): the alone files run first, with no other worker
running a test meanwhile, and the rest is then shared as loadfile shares it."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("xdist")

from tests.alone_first import AloneFirstScheduling, is_alone  # noqa: E402

ALONE_FILE = "tests/integration/test_joblib_suite.py"
COLLECTION = [
    "tests/unit/test_a.py::test_1", "tests/unit/test_a.py::test_2", "tests/unit/test_a.py::test_3",
    "tests/unit/test_b.py::test_1", "tests/unit/test_b.py::test_2",
    f"{ALONE_FILE}::test_joblibs_own_parallel_tests_pass_on_the_scaler_backend",
    "tests/unit/test_c.py::test_1", "tests/unit/test_c.py::test_2",
]


class StandInNode:
    """What the scheduler asks of an xdist worker: run these tests (by index), stop once done."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = types.SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def started(collection: list[str]) -> tuple[AloneFirstScheduling, list[StandInNode]]:
    options = types.SimpleNamespace(loadscopereorder=True)
    config = types.SimpleNamespace(getvalue=lambda name: ["2*popen"], option=options)  # two workers (-n 2)
    scheduler = AloneFirstScheduling(config)  # type: ignore[arg-type]
    nodes = [StandInNode("gw0"), StandInNode("gw1")]
    for node in nodes:
        scheduler.add_node(node)  # type: ignore[arg-type]
        scheduler.add_node_collection(node, collection)  # type: ignore[arg-type]
    scheduler.schedule()
    return scheduler, nodes


def complete(scheduler: AloneFirstScheduling, node: StandInNode, nodeid: str) -> None:
    scheduler.mark_test_complete(node, COLLECTION.index(nodeid))  # type: ignore[arg-type]


def test_the_alone_file_runs_first_and_no_other_worker_gets_a_test_until_it_is_done() -> None:
    scheduler, (first, second) = started(COLLECTION)
    alone = COLLECTION.index(f"{ALONE_FILE}::test_joblibs_own_parallel_tests_pass_on_the_scaler_backend")
    assert first.sent[0] == alone
    # With the next file, as an xdist worker runs a test only once it knows the one after.
    assert len(first.sent) > 1 and not any(COLLECTION[index].startswith(ALONE_FILE) for index in first.sent[1:])
    assert second.sent == [], "another worker runs nothing while the alone file does"

    complete(scheduler, first, COLLECTION[alone])
    assert second.sent, "once the alone file is done, the other worker gets a file"
    assert not set(first.sent) & set(second.sent)


def test_everything_runs_once_and_the_workers_are_told_to_stop() -> None:
    scheduler, nodes = started(COLLECTION)
    done: set[int] = set()
    while len(done) < len(COLLECTION):
        progressed = False
        for node in nodes:
            pending = [index for index in node.sent if index not in done]
            if pending:
                done.add(pending[0])
                scheduler.mark_test_complete(node, pending[0])  # type: ignore[arg-type]
                progressed = True
        assert progressed, f"no worker holds a test and {len(COLLECTION) - len(done)} are left"
    assert sorted(nodes[0].sent + nodes[1].sent) == list(range(len(COLLECTION)))
    assert scheduler.tests_finished and all(node.shutting_down for node in nodes)


def test_what_the_controller_would_run_beside_waits_for_the_alone_file() -> None:
    scheduler, (first, _) = started(COLLECTION)
    calls: list[str] = []
    scheduler.when_alone_done(lambda: calls.append("dask sessions"), COLLECTION)
    assert calls == []
    alone = first.sent[0]
    scheduler.mark_test_complete(first, alone)  # type: ignore[arg-type]
    assert calls == ["dask sessions"]
    scheduler.when_alone_done(lambda: calls.append("late"), COLLECTION)
    assert calls == ["dask sessions", "late"], "once the alone files ran, at once"

    without, _ = started([nodeid for nodeid in COLLECTION if not nodeid.startswith(ALONE_FILE)])
    without.when_alone_done(lambda: calls.append("none alone"), COLLECTION[:2])
    assert calls[-1] == "none alone"


def test_without_an_alone_file_it_is_loadfile() -> None:
    collection = [nodeid for nodeid in COLLECTION if not nodeid.startswith(ALONE_FILE)]
    _, (first, second) = started(collection)
    assert first.sent and second.sent, "both workers start at once"


def test_an_alone_file_is_named_by_its_path_from_the_root() -> None:
    assert is_alone(ALONE_FILE)
    assert is_alone(f"some/root/{ALONE_FILE}")
    assert not is_alone("tests/integration/test_joblib_backend.py")
    assert not is_alone(f"x{ALONE_FILE}")
