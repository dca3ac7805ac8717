"""The processes the tests start import the same `scaler` as the tests; under .ci/run, the installed wheel.

Other modules start each console script against a live cluster (test_cli.py, test_security.py, test_top.py,
test_ui.py); this one starts every console script the distribution declares, so none is left out.
"""

from __future__ import annotations

import importlib.metadata
import os

import pytest

import scaler
from tests import installed_scaler
from tests.conftest import REPO_ROOT, console_script


def declared_console_scripts() -> list[str]:
    try:
        entry_points = importlib.metadata.distribution("scaler").entry_points
    except importlib.metadata.PackageNotFoundError:
        return []
    return sorted(entry.name for entry in entry_points if entry.group == "console_scripts")


def assert_same_scaler_as_the_tests(imported_init_file: str, importer: str) -> None:
    assert os.path.realpath(imported_init_file) == os.path.realpath(scaler.__file__ or ""), (
        f"{importer} imports scaler from {imported_init_file}, the tests from {scaler.__file__}"
    )
    if installed_scaler.install_required():
        assert installed_scaler.import_problem(imported_init_file, importer) is None


@pytest.mark.skipif(not installed_scaler.install_required(),
                    reason=f"checked only when {installed_scaler.REQUIRE_INSTALL_VARIABLE}=1, as .ci/run sets it")
def test_the_tests_import_the_installed_non_editable_scaler() -> None:
    assert installed_scaler.import_problem(scaler.__file__ or "", "the test process") is None


def test_a_child_python_imports_the_same_scaler(python_env: dict[str, str]) -> None:
    child_file = installed_scaler.init_file_of_child_python(python_env, cwd=REPO_ROOT)
    assert_same_scaler_as_the_tests(child_file, "a child python")


def test_the_distribution_declares_the_documented_console_scripts() -> None:
    assert declared_console_scripts() == [
        "scaler", "scaler_cluster", "scaler_keygen", "scaler_scheduler", "scaler_slurm_cluster",
        "scaler_symphony_cluster", "scaler_top", "scaler_ui", "scaler_worker",
    ]


@pytest.mark.parametrize("name", declared_console_scripts())
def test_console_script_starts_from_the_install(name: str, python_env: dict[str, str], tmp_path) -> None:
    script = console_script(name)
    # -h exits 0 only after the entry point's module, and with it the package, imported cleanly.
    script_file = installed_scaler.init_file_of_console_script(script, ["-h"], python_env, cwd=str(tmp_path))
    assert_same_scaler_as_the_tests(script_file, script)
