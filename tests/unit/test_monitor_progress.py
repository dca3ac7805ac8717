"""The progress bar behind `Client.map(..., progress=True)` and `Client.get(..., progress=True)`."""

from __future__ import annotations

import io
import threading

import pytest

from scaler.client.progress import TaskProgress, wait_with_progress

pytestmark = pytest.mark.timeout(30)


def final_line(output: io.StringIO) -> str:
    return output.getvalue().replace("\r", "\n").strip().splitlines()[-1]


def test_counts_updates_and_draws_the_final_state() -> None:
    output = io.StringIO()
    with TaskProgress(10, "map", file=output) as progress:
        progress.update(3)
        progress.update()
        progress.set_completed(7)
        progress.set_completed(5)  # never goes back
        assert progress.completed == 7
        progress.update(3)
        assert progress.total == 10
    line = final_line(output)
    assert line.startswith("map: 100%") and "10/10" in line


def test_late_updates_after_close_are_ignored() -> None:
    output = io.StringIO()
    progress = TaskProgress(4, file=output)
    progress.update(1)
    progress.close()
    progress.close()
    progress.update(2)
    progress.set_completed(4)
    assert progress.completed == 1
    assert "1/4" in final_line(output)


def test_updates_from_another_thread() -> None:
    output = io.StringIO()
    with TaskProgress(1000, file=output) as progress:
        threads = [threading.Thread(target=lambda: [progress.update() for _ in range(250)]) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert progress.completed == 1000


def test_wait_with_progress_follows_a_counter_until_the_event() -> None:
    output = io.StringIO()
    finished = threading.Event()
    done = [0]

    def work() -> None:
        for _ in range(20):
            done[0] += 1
        finished.set()

    worker = threading.Thread(target=work)
    worker.start()
    wait_with_progress(finished, 20, lambda: done[0], "map", file=output)
    worker.join()
    assert "20/20" in final_line(output)


def test_a_failed_map_leaves_the_bar_where_it_stopped() -> None:
    output = io.StringIO()
    finished = threading.Event()
    finished.set()
    wait_with_progress(finished, 50, lambda: 7, "map", file=output)
    assert "7/50" in final_line(output)


def test_no_tqdm_monitor_thread_is_started() -> None:
    from tqdm._monitor import TMonitor

    def monitors() -> int:
        return sum(isinstance(thread, TMonitor) for thread in threading.enumerate())

    before = monitors()
    with TaskProgress(1, file=io.StringIO()) as progress:
        progress.update()
    assert monitors() == before


class FakeClock:
    """tqdm's clock, moved by hand: a rate is then a known number of tasks over a known time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    import tqdm.std

    fake = FakeClock()
    monkeypatch.setattr(tqdm.std, "time", fake)
    return fake


def test_an_instant_map_shows_no_rate() -> None:
    output = io.StringIO()
    with TaskProgress(100_000, "map", file=output) as progress:
        progress.set_completed(100_000)
    line = final_line(output)
    assert "100000/100000" in line
    assert "task/s" not in line and "s/task" not in line, line


def test_a_rate_is_shown_after_a_second_as_tasks_over_the_time_the_bar_ran(clock: FakeClock) -> None:
    output = io.StringIO()
    with TaskProgress(1000, "map", file=output) as progress:
        clock.now += 0.5
        progress.set_completed(200)
        assert "200/1000" in final_line(output) and "task/s" not in final_line(output)
        clock.now += 1.5
        progress.set_completed(1000)
    line = final_line(output)
    assert "1000/1000" in line and "500.00task/s" in line, line


def test_tasks_finished_before_the_bar_started_do_not_count_in_the_rate(clock: FakeClock) -> None:
    output = io.StringIO()
    with TaskProgress(1000, "map", file=output, completed=600) as progress:
        assert progress.completed == 600
        clock.now += 4
        progress.set_completed(1000)
    line = final_line(output)
    assert "1000/1000" in line and "100.00task/s" in line, line


def test_wait_with_progress_starts_from_what_already_finished(clock: FakeClock) -> None:
    output = io.StringIO()
    finished = threading.Event()
    finished.set()
    wait_with_progress(finished, 50, lambda: 50, "map", file=output)
    first_drawn = output.getvalue().replace("\r", "\n").strip().splitlines()[0]
    assert "50/50" in first_drawn, first_drawn
