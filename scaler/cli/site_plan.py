"""What `scaler FILE.toml` starts, in which order, with which arguments: read from the file, checked, started by
nobody here (pure: a parsed document in, parts or a ConfigFileError out).

Each section that names a long-running command is one part, run as that command with `--config FILE`, so
that the part reads the same section a user running the command by hand would. The order is the order of
dependence: the scheduler first, then standalone stores, then what joins the scheduler (local workers, the
Slurm or Symphony worker managers, the web UI). A section that leaves out the address of the scheduler gets
the one of `[scheduler]` on its command line, so a site file writes the address once. `[top]` needs a
terminal of its own and is not started; `[site]` holds this command's own options.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scaler.adapters.slurm_settings import SLURM_CLUSTER
from scaler.adapters.symphony.settings import SYMPHONY_CLUSTER
from scaler.cluster.settings import CLUSTER
from scaler.scheduler.config import default_monitor_address
from scaler.scheduler.settings import SCHEDULER
from scaler.store.settings import STORE
from scaler.ui.settings import TOP, UI
from scaler.utility.config_file import ConfigFileError, section_values
from scaler.utility.option_table import OptionTable
from scaler.utility.readiness import LISTENING, REGISTERED


@dataclasses.dataclass(frozen=True)
class PartKind:
    table: OptionTable
    module: str  # run as `python -m module --config FILE ...`
    stage: int  # started once every part of the stages before has come up
    ready_when: str | None  # what it reports over the readiness pipe once up; None: up once started


KINDS = (
    PartKind(SCHEDULER, "scaler.cli.scheduler", 0, LISTENING),
    PartKind(STORE, "scaler.cli.store", 1, LISTENING),
    PartKind(CLUSTER, "scaler.cli.cluster", 2, REGISTERED),
    PartKind(SLURM_CLUSTER, "scaler.cli.slurm_cluster", 2, None),
    PartKind(SYMPHONY_CLUSTER, "scaler.cli.symphony_cluster", 2, None),
    PartKind(UI, "scaler.cli.ui", 2, None),
)
# Checked like the others, never started.
NOT_STARTED = (TOP,)


@dataclasses.dataclass(frozen=True)
class Part:
    name: str  # its section
    stage: int
    ready_when: str | None
    command: tuple[str, ...]  # after the interpreter


def site_parts(document: dict[str, Any], path: str) -> list[Part]:
    """The parts a parsed site file lists, in start order; ConfigFileError for a bad value or an empty site."""
    values = {
        kind.table.section: section_values(document, path, kind.table)
        for kind in KINDS if kind.table.section in document
    }
    for table in NOT_STARTED:
        section_values(document, path, table)
    if not values:
        raise ConfigFileError(
            f"{path}: lists nothing to start; give one or more of "
            + ", ".join(f"[{kind.table.section}]" for kind in KINDS)
        )
    scheduler_address = values.get("scheduler", {}).get("address")
    if "scheduler" in values and scheduler_address is None:
        raise ConfigFileError(f"{path}: [scheduler] address: missing; the scheduler needs the address to listen on")
    parts = []
    for kind in KINDS:
        section = kind.table.section
        if section not in values:
            continue
        command = [kind.module, "--config", path]
        command += _filled_in(section, values[section], values.get("scheduler", {}), path)
        parts.append(Part(section, kind.stage, kind.ready_when, tuple(command)))
    return parts


def _filled_in(section: str, given: dict[str, Any], scheduler: dict[str, Any], path: str) -> list[str]:
    """The scheduler's address (or monitor address) for a section that does not give its own."""
    address = scheduler.get("address")
    if section == "scheduler":
        return []
    if section == "store":
        return [] if "scheduler_address" in given or address is None else ["--scheduler-address", address]
    if "address" in given:
        return []
    if address is None:
        raise ConfigFileError(f"{path}: [{section}] address: missing, and there is no [scheduler] to take it from")
    if section == "ui":
        return ["--", scheduler.get("monitor_address") or default_monitor_address(address)]
    return ["--", address]
