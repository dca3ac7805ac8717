"""`wheel_holds_the_package.py WHEEL PACKAGE_DIR`: fail unless the wheel ships every file of the source package.

A data file that pyproject's package-data misses (a schema, a web page, a document) is absent only from
installs, never from the source tree the developers test; this names it at build time, even when no test
reads it.
"""

from __future__ import annotations

import os
import sys
import zipfile


def source_files(package_dir: str) -> set[str]:
    parent = os.path.dirname(os.path.abspath(package_dir))
    found = set()
    for directory, subdirectories, files in os.walk(package_dir):
        subdirectories[:] = [name for name in subdirectories if name != "__pycache__"]
        for name in files:
            if not name.endswith((".pyc", ".pyo")):
                found.add(os.path.relpath(os.path.join(directory, name), parent).replace(os.sep, "/"))
    return found


def main() -> None:
    wheel, package_dir = sys.argv[1], sys.argv[2]
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    missing = sorted(source_files(package_dir) - shipped)
    if missing:
        sys.exit(f"{os.path.basename(wheel)} lacks files of {package_dir} (add them to package-data in "
                 f"pyproject.toml):\n  " + "\n  ".join(missing))
    print(f"{os.path.basename(wheel)} holds all {len(source_files(package_dir))} files of {package_dir}")


if __name__ == "__main__":
    main()
