"""Every Python block of README.md and docs/*.md runs as written and prints what its comments say.

A reader copies a block into a file and runs it; so does this test, each block in its own interpreter
and its own empty folder. A block starts what it needs (a `SchedulerClusterCombo`, or the adapters'
embedded cluster). Where a line `print(...)` carries a comment, the comment is what it prints:
`print(future.result())  # 4.0`. Those outputs must appear in that order, `...` standing for any text.

Every fence names its language. `python` blocks run. A block that is not meant to run is fenced as
`python-fragment` and must be listed in FRAGMENTS, so none is skipped without anyone deciding it.
`bash` and `console` blocks are command lines: the console scripts they call are run by
tests/integration/test_cli.py, test_top.py and test_ui.py, not here. `text` blocks show output.
"""

from __future__ import annotations

import dataclasses
import glob
import io
import os
import re
import subprocess
import sys
import tokenize

import pytest

import scaler
from tests.conftest import REPO_ROOT

DOCUMENTS = [os.path.join(REPO_ROOT, "README.md"), *sorted(glob.glob(os.path.join(REPO_ROOT, "docs", "*.md")))]

RUN = "python"
FRAGMENT = "python-fragment"
NOT_RUN = {"bash", "console", "text", "toml"}

# (document relative to the repository, first line of the block) of every block fenced as a fragment.
FRAGMENTS: set[tuple[str, str]] = {
    # needs a built native worker and a Python worker next to a scheduler: tests/integration/test_mixed_cluster.py
    # runs the same calls and graph
    ("README.md", "# with the scheduler, a Python worker and the native worker above"),
}

BLOCK_SECONDS = 180

FENCE = re.compile(r"^(\s*)```(.*)$")
# `[INFO]2024-05-01 12:00:00+0000: ...`: what a cluster started by a block logs to stdout.
LOG_LINE = re.compile(r"^\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\]\d{4}-\d{2}-\d{2} ")


@dataclasses.dataclass(frozen=True)
class Block:
    document: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    language: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.document}:{self.line}"


def fenced_blocks(path: str) -> list[Block]:
    document = os.path.relpath(path, REPO_ROOT)
    blocks: list[Block] = []
    opened: tuple[int, str] | None = None
    body: list[str] = []
    with open(path, encoding="utf-8") as text:
        for number, line in enumerate(text, start=1):
            fence = FENCE.match(line.rstrip("\n"))
            if fence is None:
                if opened is not None:
                    body.append(line)
                continue
            assert fence.group(1) == "", f"{document}:{number}: an indented fence; this test reads column 0 only"
            if opened is None:
                opened = (number, fence.group(2).strip())
                body = []
            else:
                assert fence.group(2).strip() == "", f"{document}:{number}: a fence opens inside a block"
                blocks.append(Block(document, opened[0], opened[1], "".join(body)))
                opened = None
    assert opened is None, f"{document}:{opened[0]}: a block is never closed"
    return blocks


ALL_BLOCKS = [block for path in DOCUMENTS for block in fenced_blocks(path)]
RUNNABLE = [block for block in ALL_BLOCKS if block.language == RUN]


def expected_outputs(code: str) -> list[str]:
    """The comments of `print(...)` lines: what those lines print, in order."""
    expected = []
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT and token.line.lstrip().startswith("print("):
            expected.append(token.string[1:].strip())
    return expected


def printed(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if not LOG_LINE.match(line)]


def assert_prints_in_order(expected: list[str], lines: list[str], output: str) -> None:
    position = 0
    for shown in expected:
        pattern = re.compile(".*".join(re.escape(part) for part in shown.split("...")))
        while position < len(lines) and not pattern.fullmatch(lines[position]):
            position += 1
        assert position < len(lines), f"{shown!r} not printed (in this order) by the block; it printed:\n{output}"
        position += 1


DATA_FLOW_MAP = os.path.join(REPO_ROOT, "docs", "data_flow.md")
# A file the map names: a path relative to scaler/ (`worker/agent.py`), or a bare name (`placement.py`).
MAP_FILE = re.compile(r"(?<![\w/.])([\w/]*\w\.py)\b")


def test_every_file_the_data_flow_map_names_exists() -> None:
    """docs/data_flow.md names each hop by its file: a file renamed or split must be renamed there too."""
    with open(DATA_FLOW_MAP, encoding="utf-8") as document:
        named = set(MAP_FILE.findall(document.read()))
    assert len(named) >= 30, f"the map names only {sorted(named)}: has the pattern stopped matching?"
    # The package the tests import: under .ci/run the installed one, the checkout having no scaler/.
    package = os.path.dirname(os.path.abspath(scaler.__file__))
    in_package = {
        os.path.relpath(path, package) for path in glob.glob(os.path.join(package, "**", "*.py"), recursive=True)
    }
    file_names = {os.path.basename(path) for path in in_package}
    missing = sorted(
        path for path in named
        if path not in (in_package if "/" in path else file_names) and not os.path.exists(os.path.join(REPO_ROOT, path))
    )
    assert not missing, f"docs/data_flow.md names files that do not exist: {missing}"


def test_the_documents_hold_python_blocks() -> None:
    documents = {block.document for block in RUNNABLE}
    assert {"README.md", os.path.join("docs", "monitor.md")} <= documents
    assert len(RUNNABLE) >= 7


def test_every_fence_names_a_known_language() -> None:
    unknown = [(block.name, block.language) for block in ALL_BLOCKS if block.language not in {RUN, FRAGMENT} | NOT_RUN]
    assert not unknown, f"fence these as one of {sorted({RUN, FRAGMENT} | NOT_RUN)}: {unknown}"


def test_the_blocks_that_do_not_run_are_the_listed_fragments() -> None:
    fragments = {
        (block.document, block.code.splitlines()[0] if block.code else "")
        for block in ALL_BLOCKS if block.language == FRAGMENT
    }
    assert fragments == FRAGMENTS


def test_each_block_checks_something() -> None:
    """A block that prints nothing checks nothing but that it runs; each shows at least one result."""
    silent = [block.name for block in RUNNABLE if not expected_outputs(block.code)]
    assert not silent, f"these blocks show no output in a comment: {silent}"


@pytest.mark.timeout(BLOCK_SECONDS + 30)
@pytest.mark.parametrize("block", RUNNABLE, ids=[block.name for block in RUNNABLE])
def test_block_runs_as_written_and_prints_what_it_shows(
    block: Block, python_env: dict[str, str], tmp_path
) -> None:
    script = tmp_path / "block.py"
    script.write_text(block.code, encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=python_env, capture_output=True, text=True,
        timeout=BLOCK_SECONDS, stdin=subprocess.DEVNULL,
    )
    output = completed.stdout[-4000:] + completed.stderr[-4000:]
    assert completed.returncode == 0, f"{block.name} exited with {completed.returncode}:\n{output}"
    assert_prints_in_order(expected_outputs(block.code), printed(completed.stdout), output)
