"""Which owned directories a process that starts removes: only ours, of its kind, whose owner is gone."""

from __future__ import annotations

import os

import psutil

from scaler.utility.owned_directory import make_owned_directory, remove_abandoned_directories


def test_only_directories_of_gone_owners_with_the_prefix_are_removed(tmp_path) -> None:
    me = psutil.Process()
    mine = make_owned_directory("scaler-store-", str(tmp_path))
    assert os.path.basename(mine).startswith(f"scaler-store-{me.pid}-{int(me.create_time())}-")
    assert os.stat(mine).st_mode & 0o777 == 0o700
    reused_pid = tmp_path / f"scaler-store-{me.pid}-{int(me.create_time()) - 1000}-abcd1234"
    dead = tmp_path / "scaler-store-999999999-1-abcd1234"
    other_kind = tmp_path / "scaler-worker-999999999-1-abcd1234"
    for directory in (reused_pid, dead, other_kind):
        directory.mkdir()
        (directory / "data.sock").write_bytes(b"")

    removed = remove_abandoned_directories("scaler-store-", str(tmp_path))

    assert sorted(removed) == sorted(str(path) for path in (reused_pid, dead))
    assert os.path.isdir(mine) and other_kind.is_dir()
