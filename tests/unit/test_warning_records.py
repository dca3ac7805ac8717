"""Task warnings without processes: the worker's recorder, the wire, and issuing them again in the client."""

from __future__ import annotations

import sys
import warnings
from typing import Callable, Iterator

import pytest

from scaler.protocol import capnp_codec
from scaler.protocol import messages as m
from scaler.protocol.task_warnings import issue_task_warnings
from scaler.worker.warning_recorder import MAX_WARNING_TEXT, MAX_WARNINGS_PER_TASK, WarningRecorder

pytestmark = pytest.mark.timeout(30)


class Outer:
    class InnerWarning(UserWarning):
        pass


class NeedsTwoArguments(UserWarning):
    def __init__(self, first: str, second: str) -> None:
        super().__init__(first, second)


def record_for(category: str, message: str = "text", bases: tuple[str, ...] = ("builtins.Warning",), **fields):
    values = dict(task_id=1, category=category, message=message, filename="/remote/tasks.py", lineno=12,
                  category_bases=bases, module="remote_tasks")
    values.update(fields)
    return m.TaskWarning(**values)  # type: ignore[arg-type]


@pytest.fixture
def recorder() -> Iterator[WarningRecorder]:
    """A recorder in charge of this process's warnings for the test, as in a processor."""
    with warnings.catch_warnings():
        recording = WarningRecorder()
        recording.install()
        yield recording


def raise_user_warning(text: str) -> int:
    warnings.warn(text, UserWarning, stacklevel=1)
    return 7


def issued(action: Callable[[], object], action_filter: str = "always") -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter(action_filter)
        action()
    return records


# ---------------------------------------------------------------------------------------------- recorder


def test_the_recorder_keeps_category_text_place_and_module_for_the_running_task(recorder: WarningRecorder) -> None:
    recorder.task_id = 5
    raise_user_warning("look out")
    warnings.warn("a deprecation", DeprecationWarning, stacklevel=1)  # ignored by a process's default filters
    recorder.end_task()
    first, second = recorder.take_finished()
    assert first.task_id == 5 and first.category == "builtins.UserWarning" and first.message == "look out"
    assert first.category_bases == ("builtins.Warning",)
    assert first.filename == __file__ and first.lineno == raise_user_warning.__code__.co_firstlineno + 1
    assert first.module == __name__
    assert second.category == "builtins.DeprecationWarning" and second.module == __name__
    assert recorder.take_finished() == []


def warn_at_my_caller() -> None:
    warnings.warn("blame the caller", FutureWarning, stacklevel=2)


def test_the_place_is_where_stacklevel_points(recorder: WarningRecorder) -> None:
    recorder.task_id = 1
    called_at = sys._getframe().f_lineno + 1
    warn_at_my_caller()
    recorder.end_task()
    (record,) = recorder.take_finished()
    assert (record.filename, record.lineno, record.module) == (__file__, called_at, __name__)


def test_records_of_the_running_task_wait_for_its_end(recorder: WarningRecorder) -> None:
    """A flush while a task runs (it waits on nested tasks) must not send its warnings ahead of its outcome."""
    recorder.task_id = 5
    raise_user_warning("early")
    assert recorder.take_finished() == []
    recorder.end_task()
    assert [record.message for record in recorder.take_finished()] == ["early"]


def test_a_task_sends_each_distinct_warning_once_and_at_most_the_cap(recorder: WarningRecorder) -> None:
    recorder.task_id = 9
    for _ in range(10_000):
        raise_user_warning("again")
    for index in range(MAX_WARNINGS_PER_TASK + 5):
        warnings.warn(f"number {index}", RuntimeWarning, stacklevel=1)
    recorder.end_task()
    records = recorder.take_finished()
    assert len(records) == MAX_WARNINGS_PER_TASK + 1
    assert [record.message for record in records].count("again") == 1
    summary = records[-1]
    assert summary.category == "builtins.RuntimeWarning" and summary.task_id == 9
    assert summary.message.startswith(f"scaler: this task raised 6 more warning(s) after {MAX_WARNINGS_PER_TASK}")
    assert f"builtins.RuntimeWarning: number {MAX_WARNINGS_PER_TASK - 1}" in summary.message
    # The next task starts afresh.
    recorder.task_id = 10
    raise_user_warning("again")
    recorder.end_task()
    assert [(record.task_id, record.message) for record in recorder.take_finished()] == [(10, "again")]


def test_long_texts_are_cut_and_text_that_is_not_utf8_is_made_so(recorder: WarningRecorder) -> None:
    recorder.task_id = 1
    raise_user_warning("x" * (MAX_WARNING_TEXT + 100))
    warnings.warn_explicit("odd file", UserWarning, "/tmp/\udcff.py", 3)
    recorder.end_task()
    long, odd = recorder.take_finished()
    assert len(long.message) == MAX_WARNING_TEXT
    assert odd.filename == "/tmp/?.py"
    m.encode(m.TaskResults(succeeded_ids=[], payloads=[], failures=[], warnings=[long, odd]))


def test_outside_a_task_warnings_go_where_they_went_before() -> None:
    """Between tasks (say, a thread a task left behind), a warning is the worker's own: to its stderr."""
    shown: list[tuple] = []
    with warnings.catch_warnings():
        warnings.showwarning = lambda *arguments: shown.append(arguments)
        recorder = WarningRecorder()
        recorder.install()
        raise_user_warning("between tasks")
        recorder.end_task()
    assert recorder.take_finished() == []
    assert [(str(arguments[0]), arguments[1]) for arguments in shown] == [("between tasks", UserWarning)]


def test_a_nested_tasks_warning_issued_inside_a_task_passes_on_unchanged(recorder: WarningRecorder) -> None:
    nested = record_for("some_library.LibraryWarning", "from below", bases=("builtins.UserWarning",), task_id=77)
    recorder.task_id = 3
    issue_task_warnings([nested])
    recorder.end_task()
    (record,) = recorder.take_finished()
    assert record == m.TaskWarning(**{**vars_of(nested), "task_id": 3})


def vars_of(record: m.TaskWarning) -> dict:
    return {field: getattr(record, field) for field in record.__dataclass_fields__}


# ---------------------------------------------------------------------------------------------- wire


def test_warnings_travel_with_the_results_unchanged() -> None:
    records = [
        record_for("builtins.UserWarning", "héllo", task_id=2**64 - 1, lineno=2**32 - 1),
        record_for("pkg.Deep.Nested", "", bases=("builtins.DeprecationWarning", "builtins.Warning"), module=""),
    ]
    results = m.TaskResults(succeeded_ids=[1], payloads=[b"r"], failures=[], warnings=records)
    assert m.decode(m.encode(results)) == results


def test_a_warning_many_tasks_raised_travels_once() -> None:
    """A deprecation every task of a map hits: one entry on the wire, a column of task ids."""
    same = [record_for("builtins.DeprecationWarning", "old", task_id=task_id) for task_id in range(1000)]
    alone = m.TaskResults(succeeded_ids=[], payloads=[], failures=[], warnings=same[:1])
    many = m.TaskResults(succeeded_ids=[], payloads=[], failures=[], warnings=same)
    assert m.decode(m.encode(many)) == many
    extra_bytes_per_task = (len(m.encode(many)[0]) - len(m.encode(alone)[0])) / 999
    assert extra_bytes_per_task <= 16  # a UInt64 task id and a UInt32 index, with rounding


def forged_warning_columns(task_ids: list[int], indices: list[int]) -> bytes:
    builder = capnp_codec._schema.Message.new_message()
    results = builder.init("taskResults")
    results.init("warnings", 1)[0].category = "builtins.UserWarning"
    results.warningTaskIds = task_ids
    results.warningIndices = indices
    return builder.to_bytes()


def test_warning_columns_that_disagree_are_a_protocol_error() -> None:
    with pytest.raises(m.ProtocolDecodeError, match="differ in length"):
        m.decode([forged_warning_columns([1, 2], [0])])
    with pytest.raises(m.ProtocolDecodeError, match="past the 1 warnings"):
        m.decode([forged_warning_columns([1, 2], [0, 1])])

# ---------------------------------------------------------------------------------------------- client side


def test_a_known_category_is_issued_as_itself_at_the_tasks_place() -> None:
    (record,) = issued(lambda: issue_task_warnings([record_for(f"{__name__}.Outer.InnerWarning", "inner")]))
    assert record.category is Outer.InnerWarning
    assert (str(record.message), record.filename, record.lineno) == ("inner", "/remote/tasks.py", 12)


def test_an_unknown_category_falls_back_on_its_nearest_known_base_and_says_so() -> None:
    unknown = record_for("not_loaded.Special", "hm", bases=("also_not_loaded.Base", "builtins.FutureWarning"))
    (record,) = issued(lambda: issue_task_warnings([unknown]))
    assert record.category is FutureWarning
    assert str(record.message) == "not_loaded.Special: hm"
    (bare,) = issued(lambda: issue_task_warnings([record_for("nowhere.Thing", "x", bases=())]))
    assert bare.category is UserWarning and str(bare.message) == "nowhere.Thing: x"
    # A category the client has but cannot build from a text alone: its base, too.
    (odd,) = issued(lambda: issue_task_warnings([
        record_for(f"{__name__}.NeedsTwoArguments", "y", bases=("builtins.UserWarning", "builtins.Warning"))
    ]))
    assert odd.category is UserWarning and str(odd.message) == f"{__name__}.NeedsTwoArguments: y"
    # A name that is not a warning class is not used as one.
    (not_a_warning,) = issued(lambda: issue_task_warnings([record_for("builtins.ValueError", "z", bases=())]))
    assert not_a_warning.category is UserWarning


def test_the_callers_filters_apply() -> None:
    record = record_for("builtins.UserWarning", "filtered")
    assert issued(lambda: issue_task_warnings([record]), "ignore") == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="filtered"):
            issue_task_warnings([record])
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", module="remote_tas")  # filters match the task's module
        issue_task_warnings([record, record_for("builtins.UserWarning", "elsewhere", module="other")])
    assert [str(r.message) for r in records] == ["elsewhere"]


def test_the_default_action_shows_each_place_once_across_calls() -> None:
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("default")
        for _ in range(3):
            twice = [record_for("builtins.UserWarning", "once"), record_for("builtins.UserWarning", "once")]
            issue_task_warnings(twice)
        issue_task_warnings([record_for("builtins.UserWarning", "once", lineno=13)])
        issue_task_warnings([record_for("builtins.UserWarning", "no module", module="")])
        issue_task_warnings([record_for("builtins.UserWarning", "no module", module="")])
    assert [(str(r.message), r.lineno) for r in records] == [("once", 12), ("once", 13), ("no module", 12)]
