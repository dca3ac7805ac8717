"""The original Scaler 1.9.9 in a virtual environment of its own: same package name as this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

VERSION = "1.9.9"
VENV = Path(__file__).resolve().parent.parent / f".venv-scaler-{VERSION}"


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def installed_version(python: Path) -> str:
    """The version the venv imports, asked from a folder where this checkout's `scaler` cannot shadow it."""
    probe = "import scaler.about as about; print(about.__version__)"
    try:
        completed = subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, timeout=120, cwd=VENV,
            env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return completed.stdout.strip() if completed.returncode == 0 else ""


def ensure(install: bool = True) -> tuple[Path | None, str]:
    """The venv's python, creating the venv and installing scaler==1.9.9 on first use; or (None, why not)."""
    python = venv_python()
    if python.exists() and installed_version(python) == VERSION:
        return python, ""
    if not install:
        return None, f"scaler {VERSION} venv missing ({VENV}); run without --no-install to create it"
    print(f"creating {VENV} with scaler=={VERSION} (once) ...", file=sys.stderr, flush=True)
    base_python = getattr(sys, "_base_executable", None) or sys.executable
    steps = [
        [base_python, "-m", "venv", str(VENV)],
        [str(python), "-m", "pip", "install", "--quiet", f"scaler=={VERSION}"],
    ]
    for step in steps:
        completed = subprocess.run(step, capture_output=True, text=True)
        if completed.returncode != 0:
            return None, f"could not set up scaler {VERSION}: {' '.join(step[-3:])}: {completed.stderr.strip()[-300:]}"
    version = installed_version(python)
    if version != VERSION:
        return None, f"the venv imports scaler {version or '(nothing)'}, not {VERSION}"
    return python, ""
