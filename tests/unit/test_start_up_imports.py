"""Every cluster start imports Scaler in a scheduler, a cluster, a store, each worker's agent and processor (and
a processor for each nested task that waits): what their start imports only for a rare path is paid many times
over. These modules stay out until that path is taken."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, child_python_environment

# Imported only for: a profiled task (psutil in a processor), a --logging-config-file (logging.config), libc's
# malloc_trim once a processor idles (ctypes.util runs `ldconfig -p`), the option tables (a processor gets its
# settings on its command line), joblib's import hook (importlib.abc would bring importlib.resources), and a
# --config file (tomllib).
RARE_IN_EVERY_PROCESS = ["logging.config", "ctypes.util", "importlib.abc", "tomllib"]
NOT_AT_START = {
    # A processor takes its orders from the agent, but none of the agent's actions.
    "scaler.worker.processor": [
        *RARE_IN_EVERY_PROCESS, "psutil", "scaler.worker.settings", "scaler.worker.agent_actions",
    ],
    # The agent runs no task: it pickles only its own errors, with the standard pickler.
    "scaler.worker.agent": [*RARE_IN_EVERY_PROCESS, "cloudpickle"],
    "scaler.cli.store": RARE_IN_EVERY_PROCESS,
    # A cluster's process starts the others and watches them: the protocol's codec (which its display would bring
    # for a notebook's view of the monitor feed), ZeroMQ (it opens no socket) and psutil are no part of that.
    "scaler.cli.cluster": [*RARE_IN_EVERY_PROCESS, "capnp", "scaler.cluster.display", "zmq", "psutil"],
    # The scheduler's server, the protocol's codec and ZeroMQ come once its command line is known good (a --help
    # or a wrong option needs none of them).
    "scaler.cli.scheduler": [*RARE_IN_EVERY_PROCESS, "scaler.scheduler.server", "capnp", "zmq"],
    # The HTTP server of /metrics comes only with --metrics-port.
    "scaler.scheduler.server": [*RARE_IN_EVERY_PROCESS, "wsgiref.simple_server"],
}

_SCRIPT = """
import json, sys
watched = json.loads(sys.argv[2])
before = {name for name in watched if name in sys.modules}
__import__(sys.argv[1])
print(json.dumps(sorted(name for name in watched if name in sys.modules and name not in before)))
"""


@pytest.mark.parametrize("module", sorted(NOT_AT_START))
def test_a_process_start_leaves_out_what_only_a_rare_path_needs(module: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-c", _SCRIPT, module, json.dumps(NOT_AT_START[module])],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, env=child_python_environment(),
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == [], f"importing {module} also imported these"
