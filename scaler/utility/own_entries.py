"""The entries of a shared folder (/tmp) that belong to this user: the only ones whose leftovers a
process of ours may remove. Owned directories, work directories and monitor sockets are found so."""

from __future__ import annotations

import os
import re
from typing import Callable, NamedTuple


class OwnEntry(NamedTuple):
    path: str
    name_match: re.Match[str]
    status: os.stat_result


def own_entries(directory: str, name: re.Pattern[str], is_kind: Callable[[int], bool]) -> list[OwnEntry]:
    """The entries of `directory` whose name `name` matches and whose mode `is_kind` accepts (stat.S_ISDIR,
    stat.S_ISSOCK; links are not followed), owned by this user's uid. None when the folder cannot be read."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    found = []
    for entry in entries:
        name_match = name.match(entry.name)
        if name_match is None:
            continue
        try:
            status = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if is_kind(status.st_mode) and status.st_uid == os.getuid():
            found.append(OwnEntry(entry.path, name_match, status))
    return found
