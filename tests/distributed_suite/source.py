"""distributed's own test_client.py, fetched at run time: this repository holds none of distributed's code.

distributed's wheel and its PyPI sdist leave its tests out. Debian's source package of dask.distributed
keeps them: its upstream ("orig") tarball is the release's source tree, repacked only to drop files Debian
cannot ship. The tarball is pinned by its SHA-256 and taken from Debian's archive, which keeps it while a
Debian release that carries this version (Debian 13, "trixie") is supported.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import urllib.error
import urllib.request

VERSION = "2024.12.1"  # distributed's release whose tests run (Debian's 2024.12.1+ds-1 and -3 share the tarball)
TARBALL = f"dask.distributed_{VERSION}+ds.orig.tar.xz"
URL = f"https://deb.debian.org/debian/pool/main/d/dask.distributed/{TARBALL}"
SHA256 = "e9c010426e74c79b4cbb01dc0b7eb0046dc152453447e0c2631750105dbcea24"
TEST_FILE = f"distributed-{VERSION}/distributed/tests/test_client.py"
FETCH_TIMEOUT_SECONDS = 60


class SourceUnavailable(Exception):
    """The tarball could not be fetched, or was not the pinned one."""


def test_client_source(directory: str) -> str:
    """The text of distributed's test_client.py, from the tarball fetched into `directory` (once per directory)."""
    path = os.path.join(directory, TARBALL)
    if not os.path.exists(path):
        _fetch(path)
    with tarfile.open(path, "r:xz") as tarball:
        member = tarball.extractfile(TEST_FILE)
        if member is None:
            raise SourceUnavailable(f"{TARBALL} holds no {TEST_FILE}")
        return member.read().decode("utf-8")


def _fetch(path: str) -> None:
    try:
        with urllib.request.urlopen(URL, timeout=FETCH_TIMEOUT_SECONDS) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as error:
        raise SourceUnavailable(f"could not fetch {URL}: {error}") from error
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise SourceUnavailable(f"{URL} has SHA-256 {digest}, not the pinned {SHA256}")
    partial = path + ".partial"
    with open(partial, "wb") as file:
        file.write(data)
    os.replace(partial, path)
