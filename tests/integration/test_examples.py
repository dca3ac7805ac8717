"""Each example in examples/ runs as a user would run it, and prints what it promises.

They run while port 2345 is taken, as it is on a machine where the README's `scaler_scheduler
tcp://127.0.0.1:2345` runs: an example that starts its own cluster must pick a free port, not join
(or fail on) whatever holds that one.
"""

from __future__ import annotations

import ast
import errno
import os
import re
import socket
import subprocess
import sys
from typing import Callable, Iterator

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: pytest's own TOML reader
    import tomli as tomllib  # type: ignore[no-redef]

from tests.conftest import REPO_ROOT

EXAMPLES = os.path.join(REPO_ROOT, "examples")

# `[INFO]2024-05-01 12:00:00+0000: ...`: what the cluster an example starts logs to stdout.
LOG_LINE = re.compile(r"^\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\]\d{4}-\d{2}-\d{2} ")

# Generous for a loaded machine, and a bound on the example's own waits: an example stuck connecting
# to a port that is not its scheduler's waits out the client's 60 s timeout, then fails.
EXAMPLE_SECONDS = 180


def run_example(name: str, environment: dict[str, str], arguments: tuple[str, ...] = ()) -> str:
    completed = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name), *arguments],
        env=environment, capture_output=True, text=True, timeout=EXAMPLE_SECONDS, cwd=REPO_ROOT,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout


def printed(output: str) -> list[str]:
    """What the example printed itself, without the log lines of the cluster it started."""
    return [line for line in output.splitlines() if not LOG_LINE.match(line)]


def check_simple_client(output: str) -> None:
    assert printed(output) == ["4.0", "[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]"]


def check_map_client(output: str) -> None:
    assert [line[:6] for line in printed(output)] == ["661.46"]


def check_calculate(output: str) -> None:
    assert printed(output) == [f"{CALCULATE_TASKS} tasks done"]


def check_graph_client(output: str) -> None:
    lines = printed(output)
    assert lines[0] == "1"
    assert lines[1].startswith("{'a': 2, 'b': 2, 'c': 3, 'd': 4, 'e': 1, 'f': <function add at")


def check_dask_array(output: str) -> None:
    text = "\n".join(printed(output))
    assert "same as dask.threaded: True" in text
    assert "matches: True" in text
    assert "max below 1: True" in text


def check_task_profiling(output: str) -> None:
    lines = printed(output)
    assert [line.split()[0] for line in lines] == ["duration_us", "peak_memory"]
    assert all(int(line.split()[1]) >= 0 for line in lines)


def printed_is(*expected: str) -> Callable[[str], None]:
    def check(output: str) -> None:
        assert printed(output) == list(expected)

    return check


# Every file in examples/, with what it must print. The examples of document 003 are here too;
# scaler_top's is covered by tests/integration/test_top.py.
EXPECTED: dict[str, Callable[[str], None]] = {
    "simple_client.py": check_simple_client,
    "map_client.py": check_map_client,
    "calculate.py": check_calculate,
    "graph_client.py": check_graph_client,
    "dask_array.py": check_dask_array,
    "send_object.py": printed_is("1", "2"),
    "nested_client.py": printed_is("8"),  # fibonacci(6), as run here (ARGUMENTS)
    "graphtask_nested_client.py": printed_is("5"),  # fibonacci(5)
    "disconnect_client.py": printed_is(),
    "task_profiling.py": check_task_profiling,
    "custom_serializer.py": printed_is("3", "6"),
}


# The examples that take a size run smaller here: what they show is the same, and the suite stays short.
# calculate.py's 100,000 tasks are the README's first command; test_nested.py runs both fibonacci functions,
# nested_client's at its default size (8) and deeper.
CALCULATE_TASKS = 10_000
ARGUMENTS: dict[str, tuple[str, ...]] = {
    "calculate.py": (str(CALCULATE_TASKS),),
    "nested_client.py": ("6",),
    "graphtask_nested_client.py": ("5",),
}


@pytest.fixture(scope="module")
def port_2345_taken() -> Iterator[None]:
    """Something listens on 127.0.0.1:2345 and never answers, unless something already holds the port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 2345))
        listener.listen(16)
    except OSError as error:
        listener.close()
        if error.errno != errno.EADDRINUSE:
            raise
        yield  # taken already, which is the point
        return
    try:
        yield
    finally:
        listener.close()


def test_every_example_is_run_here() -> None:
    on_disk = {name for name in os.listdir(EXAMPLES) if name.endswith(".py")}
    assert on_disk == set(EXPECTED)


def imported_packages(path: str) -> set[str]:
    """The top-level names an example imports."""
    with open(path) as source:
        tree = ast.parse(source.read())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def test_the_examples_extra_installs_what_the_examples_import() -> None:
    """`pip install 'scaler[examples]'` is enough to run every example (their import names are their packages')."""
    with open(os.path.join(REPO_ROOT, "pyproject.toml"), "rb") as pyproject:
        project = tomllib.load(pyproject)["project"]
    installed = requirement_names(project["dependencies"]) | requirement_names(
        project["optional-dependencies"].get("examples", [])
    )
    for name in sorted(EXPECTED):
        needed = imported_packages(os.path.join(EXAMPLES, name)) - set(sys.stdlib_module_names) - {"scaler"}
        assert needed <= installed, f"examples/{name} imports {sorted(needed - installed)}, which no extra installs"


@pytest.mark.timeout(EXAMPLE_SECONDS + 20)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_and_prints_what_it_promises(
    name: str, python_env: dict[str, str], port_2345_taken: None
) -> None:
    EXPECTED[name](run_example(name, python_env, ARGUMENTS.get(name, ())))
