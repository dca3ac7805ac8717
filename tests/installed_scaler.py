"""Where a process imports `scaler` from, and whether that is the installed, non-editable distribution.

CI tests the wheel users install, so a source tree that shadows the install (the current directory, a
PYTHONPATH entry, pytest's rootdir on sys.path, an editable install) must not go unnoticed: with
SCALER_TESTS_REQUIRE_INSTALL=1 (set by .ci/run), tests/conftest.py refuses to start the session unless
the test process, a child `python -c` and a console script all import the installed `scaler`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import sysconfig
from typing import Sequence

REQUIRE_INSTALL_VARIABLE = "SCALER_TESTS_REQUIRE_INSTALL"

# PYTHONVERBOSE names the file each module is loaded from, e.g. "# code object from /x/scaler/__init__.py"
# or "# /x/scaler/__pycache__/__init__.cpython-311.pyc matches /x/scaler/__init__.py".
_VERBOSE_SCALER_INIT = re.compile(r"(/[^'\s]*/scaler/__init__\.py)\b")


class NotInstalledError(Exception):
    """The `scaler` distribution of this interpreter is missing, editable, or not in its site-packages."""


def install_required() -> bool:
    return os.environ.get(REQUIRE_INSTALL_VARIABLE, "") not in ("", "0")


def installed_init_file() -> str:
    """The real path of scaler/__init__.py as the installed distribution recorded it."""
    try:
        distribution = importlib.metadata.distribution("scaler")
    except importlib.metadata.PackageNotFoundError:
        raise NotInstalledError(f"no scaler distribution is installed for {sys.executable}") from None
    direct_url = json.loads(distribution.read_text("direct_url.json") or "{}")
    if direct_url.get("dir_info", {}).get("editable"):
        raise NotInstalledError(
            f"scaler is installed editable from {direct_url.get('url')}: it imports the source tree, not a wheel"
        )
    recorded = [path for path in distribution.files or () if path.as_posix() == "scaler/__init__.py"]
    if not recorded:
        raise NotInstalledError(
            f"the scaler distribution at {distribution.locate_file('')} records no scaler/__init__.py"
        )
    init_file = os.path.realpath(str(distribution.locate_file(recorded[0])))
    site_directories = {os.path.realpath(sysconfig.get_path(scheme)) for scheme in ("purelib", "platlib")}
    if os.path.dirname(os.path.dirname(init_file)) not in site_directories:
        raise NotInstalledError(
            f"the scaler distribution's files are at {init_file}, outside this interpreter's site-packages "
            f"{sorted(site_directories)}"
        )
    return init_file


def import_problem(imported_init_file: str, importer: str) -> str | None:
    """Why `importer`, which imported scaler from `imported_init_file`, did not test the install; None if it did."""
    try:
        expected = installed_init_file()
    except NotInstalledError as error:
        return str(error)
    if os.path.realpath(imported_init_file) != expected:
        return f"{importer} imports scaler from {imported_init_file}, not from the installed distribution ({expected})"
    return None


def init_file_of_child_python(environment: dict[str, str], cwd: str) -> str:
    """scaler.__file__ as a child `python -c` started with this environment and working directory sees it."""
    completed = subprocess.run(
        [sys.executable, "-c", "import scaler; print(scaler.__file__)"],
        env=environment, cwd=cwd, capture_output=True, text=True, timeout=60,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"a child python could not import scaler:\n{completed.stderr[-2000:]}")
    return completed.stdout.strip()


def init_file_of_console_script(
    script: str, arguments: Sequence[str], environment: dict[str, str], cwd: str
) -> str:
    """The scaler/__init__.py a console script loads, read from its PYTHONVERBOSE trace; it must exit 0."""
    completed = subprocess.run(
        [script, *arguments], env={**environment, "PYTHONVERBOSE": "1"}, cwd=cwd,
        capture_output=True, text=True, timeout=60,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(arguments)} exited with {completed.returncode}:\n"
                           f"{completed.stderr[-2000:]}")
    found = _VERBOSE_SCALER_INIT.search(completed.stderr)
    if found is None:
        raise RuntimeError(f"{script} {' '.join(arguments)} loaded no scaler/__init__.py")
    return found.group(1)
