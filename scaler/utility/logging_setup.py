"""One log format for every process: `[LEVEL]time: component: message`, as the product documents show."""

from __future__ import annotations

import logging
import os
import sys
from typing import Sequence

LOG_FORMAT = "[%(levelname)s]%(asctime)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S%z"
DEFAULT_LOGGING_PATHS = ("/dev/stdout",)
LOGGING_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def setup_logging(
    paths: Sequence[str] = DEFAULT_LOGGING_PATHS, level: str = "INFO", config_file: str | None = None
) -> None:
    """Configure the root logger; a logging config file (logging.config.fileConfig format) wins over the rest."""
    if config_file:
        # Imported here: logging.config brings logging.handlers, socketserver and more, which every
        # scheduler, worker and store would import at start for the rare config file.
        from logging.config import fileConfig

        fileConfig(config_file, disable_existing_loggers=False)
        logging.info(f"logging configured from {config_file}")
        return
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    formatter = logging.Formatter(LOG_FORMAT, DATE_FORMAT)
    handler: logging.Handler
    for path in paths:
        if path == "/dev/stdout":
            handler = logging.StreamHandler(sys.stdout)
        elif path == "/dev/stderr":
            handler = logging.StreamHandler(sys.stderr)
        else:
            handler = logging.FileHandler(path)
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level.upper())
    logging.info(f"logging to {tuple(paths)}")


def check_logging_level(level: str) -> None:
    if not isinstance(level, str) or level.upper() not in LOGGING_LEVELS:
        raise ValueError(f"logging_level must be one of {LOGGING_LEVELS}, got {level!r}")


def check_logging_paths(paths: Sequence[str]) -> None:
    if isinstance(paths, str) or not paths:
        raise ValueError(f"logging_paths must be a non-empty list of paths, got {paths!r}")
    for path in paths:
        problem = logging_path_problem(path)
        if problem:
            raise ValueError(f"logging_paths: {problem}")


def logging_path_problem(path: str) -> str | None:
    """Why a log cannot be written to `path` (checked before anything starts), or None."""
    if not isinstance(path, str) or not path:
        return f"{path!r} is not a path"
    if path in ("/dev/stdout", "/dev/stderr"):
        return None
    if "://" in path:
        return f"{path!r} looks like an address, not a file; put the address last, or end the paths with --"
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"cannot write {path!r}: directory {directory!r} does not exist"
    if os.path.isdir(path):
        return f"cannot write {path!r}: it is a directory"
    if not os.access(path if os.path.exists(path) else directory, os.W_OK):
        return f"cannot write {path!r}: permission denied"
    return None
