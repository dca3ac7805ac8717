"""Build the native worker with CMake and print the path of the executable (the last line of output).

    python native/build.py                      # into build/native/ of this checkout
    python native/build.py --build-dir /tmp/x   # elsewhere

The tests, the benchmarks and .ci/run build through this script, so they all agree on where the
executable is and on what a missing tool means: a one-paragraph error naming the Debian packages to
install, and exit status 3 (MISSING_PACKAGES_STATUS), which the tests read as "skip, naming them".
Any other failure (the compiler's) is exit status 2. The build is incremental, and concurrent runs
wait for each other.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import time

NATIVE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(NATIVE, "worker")
REPOSITORY = os.path.dirname(NATIVE)
DEFAULT_BUILD_DIR = os.path.join(REPOSITORY, "build", "native")
EXECUTABLE_NAME = "scaler_native_worker"
DEBIAN_PACKAGES = "cmake g++ pkg-config libzmq3-dev libcapnp-dev capnproto libmsgpack-dev"
# What the build looks for, and the Debian package that provides it.
_TOOL_PACKAGES = {"cmake": "cmake", "c++": "g++", "pkg-config": "pkg-config", "capnp": "capnproto",
                  "capnpc-c++": "capnproto"}
_PKG_CONFIG_PACKAGES = {"libzmq": "libzmq3-dev", "capnp": "libcapnp-dev", "msgpack": "libmsgpack-dev"}
BUILD_FAILED_STATUS = 2
MISSING_PACKAGES_STATUS = 3


class BuildError(Exception):
    """The native worker cannot be built here; the text says why and what to install."""


class MissingPackagesError(BuildError):
    """A tool or library the build needs is not installed: the machine's state, not a defect of the source."""


def find_schema() -> str:
    """scaler.capnp of this checkout, or of the installed scaler when the checkout has no scaler/ (.ci/run)."""
    in_checkout = os.path.join(REPOSITORY, "scaler", "protocol", "scaler.capnp")
    if os.path.exists(in_checkout):
        return in_checkout
    spec = importlib.util.find_spec("scaler.protocol")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            installed = os.path.join(location, "scaler.capnp")
            if os.path.exists(installed):
                return installed
    raise BuildError("cannot find scaler/protocol/scaler.capnp: neither this checkout nor an installed scaler has it")


def missing_tools() -> dict[str, str]:
    """{what was not found: the Debian package that provides it}."""
    missing = {tool: package for tool, package in _TOOL_PACKAGES.items() if shutil.which(tool) is None}
    if shutil.which("pkg-config") is not None:
        for module, package in _PKG_CONFIG_PACKAGES.items():
            if subprocess.run(["pkg-config", "--exists", module]).returncode != 0:
                missing[f"{module} (pkg-config)"] = package
    else:  # nothing can tell whether the libraries are there: name them too
        missing.update({f"{module} (pkg-config)": package for module, package in _PKG_CONFIG_PACKAGES.items()})
    return missing


def build(build_dir: str = DEFAULT_BUILD_DIR) -> str:
    """Configure (once) and build; returns the executable's path. Raises BuildError with the reason."""
    missing = missing_tools()
    if missing:
        packages = " ".join(dict.fromkeys(missing.values()))
        raise MissingPackagesError(
            f"cannot build the native worker: {', '.join(missing)} not found (Debian packages: {packages}). "
            f"On Debian or Ubuntu: apt-get install -y {DEBIAN_PACKAGES}"
        )
    schema = find_schema()
    os.makedirs(build_dir, exist_ok=True)
    with open(os.path.join(build_dir, ".build-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test session may be building into the same directory
        _run(["cmake", "-S", SOURCE, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", f"-DSCALER_SCHEMA={schema}"])
        _run(["cmake", "--build", build_dir, "--parallel", str(os.cpu_count() or 1)])
    executable = os.path.join(build_dir, EXECUTABLE_NAME)
    if not os.access(executable, os.X_OK):
        raise BuildError(f"the build finished but {executable} is not there")
    return executable


def _run(command: list[str]) -> None:
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if completed.returncode != 0:
        raise BuildError(f"`{' '.join(command)}` failed (exit status {completed.returncode}):\n{completed.stdout}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=DEFAULT_BUILD_DIR, help=f"where to build (default {DEFAULT_BUILD_DIR})")
    arguments = parser.parse_args()
    started = time.monotonic()
    try:
        executable = build(arguments.build_dir)
    except BuildError as error:
        print(f"native/build.py: {error}", file=sys.stderr)
        sys.exit(MISSING_PACKAGES_STATUS if isinstance(error, MissingPackagesError) else BUILD_FAILED_STATUS)
    print(f"native/build.py: built in {time.monotonic() - started:.1f} s", file=sys.stderr)
    print(executable)


if __name__ == "__main__":
    main()
