"""Which worker directories an agent that starts removes: only ours whose owner is gone."""

from __future__ import annotations

import os
import pathlib
import tempfile
import time
from typing import Iterator

import psutil
import pytest

from scaler.worker.work_directory import remove_abandoned_work_directories


@pytest.fixture
def short_tmp() -> Iterator[pathlib.Path]:
    """A directory whose sockets' paths fit a unix socket address (108 bytes): a tmp_path may not (it is
    longer under pytest-xdist), and a socket that cannot be probed counts as listening, so nothing is removed."""
    with tempfile.TemporaryDirectory(prefix="wd-") as directory:
        yield pathlib.Path(directory)


def test_only_directories_of_gone_owners_are_removed(short_tmp: pathlib.Path) -> None:
    tmp_path = short_tmp
    me = psutil.Process()
    mine = tmp_path / f"scaler-worker-{me.pid}-{int(me.create_time())}-abcd1234"
    reused_pid = tmp_path / f"scaler-worker-{me.pid}-{int(me.create_time()) - 1000}-abcd1234"  # same pid, earlier
    dead = tmp_path / "scaler-worker-999999999-1-abcd1234"
    old_unnamed = tmp_path / "scaler-worker-abcd1234"  # an earlier version's, its agent long gone
    young_unnamed = tmp_path / "scaler-worker-efgh5678"  # may be an agent that has not bound its socket yet
    someone_elses = tmp_path / "unrelated-999999999-1-abcd1234"
    for directory in (mine, reused_pid, dead, old_unnamed, young_unnamed, someone_elses):
        directory.mkdir()
        (directory / "running_task_0").write_bytes(b"\0" * 8)
    an_hour_ago = time.time() - 3600
    os.utime(old_unnamed, (an_hour_ago, an_hour_ago))

    removed = remove_abandoned_work_directories(str(tmp_path))

    assert sorted(removed) == sorted(str(path) for path in (reused_pid, dead, old_unnamed))
    assert mine.is_dir() and young_unnamed.is_dir() and someone_elses.is_dir()
